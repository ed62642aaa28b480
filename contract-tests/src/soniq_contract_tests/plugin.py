"""The pytest11 plugin of the Soniq contract suite.

pytest loads this module in every session of an environment where
soniq-contract-tests is installed, so it stays light: it registers the
options and the marker, and runs the suite's own ``async def`` tests on a
fresh event loop each. Nothing from the suite or from soniq is imported
until a suite test actually runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

SUITE_PACKAGE = "soniq_contract_tests"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("soniq", "Soniq backend contract suite")
    group.addoption(
        "--soniq-url",
        action="store",
        default=None,
        metavar="URL",
        help="backend URL to run the Soniq contract suite against (fallback: env SONIQ_CONTRACT_URL)",
    )
    group.addoption(
        "--soniq-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra keyword passed to the backend's from_url (repeatable; VALUE is parsed as JSON when it can be)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "soniq_contract: a test of the Soniq backend contract suite")
    config.addinivalue_line(
        "markers", "soniq_worker_process: a contract scenario that runs real `soniq worker` processes"
    )
    config.addinivalue_line(
        "markers",
        "soniq_role(*roles): the backend roles a contract test needs; skipped where the backend does not declare them",
    )


def _suite_coroutine_function(item: pytest.Function) -> Callable[..., Any] | None:
    """The test's callable when it is an ``async def`` defined in the suite's own modules."""
    test_function: Callable[..., Any] = item.obj
    function = getattr(test_function, "__func__", test_function)
    if not inspect.iscoroutinefunction(function):
        return None
    if not str(getattr(function, "__module__", "")).startswith(SUITE_PACKAGE + "."):
        return None
    return test_function


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run the suite's coroutine tests ourselves: the suite must not need pytest-asyncio."""
    test_function = _suite_coroutine_function(pyfuncitem)
    if test_function is None:
        return None
    from soniq_contract_tests._runner import run_coroutine_test

    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    run_coroutine_test(test_function, arguments)
    return True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the URL form, deselect what `selection` says does not apply to the URL's backend.

    Not reported as skips: they do not apply to such a backend at all. The
    class form learns its backend only from fixtures and skips there instead.
    """
    from soniq_contract_tests.selection import WORKER_PROCESS_MARK, worker_processes_excluded

    url_form = SUITE_PACKAGE + ".test_backend_contract"
    scenarios = [
        item
        for item in items
        if isinstance(item, pytest.Function)
        and item.module is not None
        and item.module.__name__ == url_form
        and item.get_closest_marker(WORKER_PROCESS_MARK) is not None
    ]
    if not scenarios:
        return
    import os

    url = config.getoption("--soniq-url", None) or os.environ.get("SONIQ_CONTRACT_URL")
    if not url:
        return
    from soniq.backend import backend_class_for

    try:
        backend = backend_class_for(url).from_url(url)
    except Exception:
        return  # the suite's own fixture reports a bad URL, test by test
    reason = worker_processes_excluded(backend.capabilities, type(backend).__name__)
    if reason is None:
        return
    config.hook.pytest_deselected(items=scenarios)
    chosen = set(scenarios)
    items[:] = [item for item in items if item not in chosen]
    config.stash[_DESELECTED_NOTE] = f"soniq: {len(scenarios)} tests deselected for {url!r}: {reason}"


_DESELECTED_NOTE = pytest.StashKey[str]()

ROLE_REPORTS = pytest.StashKey[dict[str, Any]]()
"""Backend class name -> `selection.RoleReport`, filled by the suite's role check as tests run."""


_WORKER_OUTPUT_KEY = "soniq_contract_role_reports"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under pytest-xdist, hand this worker's role reports to the controller, which prints the summary."""
    workeroutput = getattr(session.config, "workeroutput", None)
    reports = session.config.stash.get(ROLE_REPORTS, {})
    if workeroutput is not None and reports:
        workeroutput[_WORKER_OUTPUT_KEY] = {
            name: {"roles": report.roles, "skipped": dict(report.skipped)} for name, report in reports.items()
        }


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist: merge what a worker ran into the controller's role reports."""
    received = getattr(node, "workeroutput", {}).get(_WORKER_OUTPUT_KEY)
    if not received:
        return
    from soniq_contract_tests.selection import RoleReport

    reports = node.config.stash.setdefault(ROLE_REPORTS, {})
    for name, data in received.items():
        report = reports.setdefault(name, RoleReport(data["roles"]))
        report.skipped.update(data["skipped"])


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    note = config.stash.get(_DESELECTED_NOTE, None)
    if note:
        terminalreporter.write_line(note)
    for backend_name, report in sorted(config.stash.get(ROLE_REPORTS, {}).items()):
        for line in report.lines(backend_name):
            terminalreporter.write_line(line)
