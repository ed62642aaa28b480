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


PROCESS_SCENARIOS = SUITE_PACKAGE + ".test_worker_processes"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the real-process scenarios for a backend no second process can share.

    They do not apply to such a backend (an in-process store), so they are not
    reported as skips: a store that several processes can share must pass them.
    """
    scenarios = [
        item
        for item in items
        if isinstance(item, pytest.Function) and item.module is not None and item.module.__name__ == PROCESS_SCENARIOS
    ]
    if not scenarios:
        return
    import os

    url = config.getoption("--soniq-url", None) or os.environ.get("SONIQ_CONTRACT_URL")
    if not url:
        return
    from soniq.discovery import backend_class_for

    try:
        capabilities = backend_class_for(url).from_url(url).capabilities
    except Exception:
        return
    if capabilities.shared_across_processes:
        return
    config.hook.pytest_deselected(items=scenarios)
    items[:] = [item for item in items if item not in scenarios]
    config.stash[_DESELECTED_NOTE] = (
        f"soniq: {len(scenarios)} real-process shutdown scenarios deselected: the backend for {url!r} "
        "is not shared across processes (capabilities.shared_across_processes is False)"
    )


_DESELECTED_NOTE = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    note = config.stash.get(_DESELECTED_NOTE, None)
    if note:
        terminalreporter.write_line(note)
