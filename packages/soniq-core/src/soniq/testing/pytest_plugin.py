"""Pytest fixtures for apps that use Soniq. Enable in ``conftest.py``:

    pytest_plugins = ["soniq.testing.pytest_plugin"]

- `soniq_app`: a fresh app from `make_app()` (memory, unless ``--soniq-app-url`` or a
  `use_backend` block says otherwise), closed after the test. With ``--soniq-app-url`` each
  test gets a namespace of its own in that store (``backend_options={"namespace": ...}``),
  set up before the test and dropped after it, so no test sees another's jobs.
- `soniq_memory`: the same on the in-memory store, always.
- ``@pytest.mark.soniq(app="pkg.module:app")`` gives either fixture the jobs of your own
  app, and points your app's ``enqueue`` / ``enqueue_many`` at the fixture for the test.

The fixtures are synchronous so they work with any async test runner; the app connects
on first use inside the test's event loop.
"""

from __future__ import annotations

import asyncio
import importlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from soniq import features
from soniq.app import Soniq
from soniq.backend import SchemaAdmin, has_role
from soniq.testing.helpers import MEMORY_URL, make_app, use_backend

NAMESPACE_PREFIX = "soniq_test_"
"""Each `soniq_app` test's namespace (schema, key prefix or file) with ``--soniq-app-url``: this and 16 hex digits."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("soniq")
    group.addoption(
        "--soniq-app-url",
        default=None,
        metavar="URL",
        help="backend URL the soniq_app fixture uses (default: a fresh in-memory store)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", 'soniq(app="module:attr"): give the Soniq fixtures the jobs of that app')


def _adopt(request: pytest.FixtureRequest, app: Soniq) -> None:
    marker = request.node.get_closest_marker("soniq")
    path = marker.kwargs.get("app") if marker else None
    if not path:
        return
    module_name, _, attr = str(path).partition(":")
    if not attr:
        raise pytest.UsageError(f'@pytest.mark.soniq(app=...) takes "module:attr", got {path!r}')
    source = getattr(importlib.import_module(module_name), attr)
    if not isinstance(source, Soniq):
        raise pytest.UsageError(f"{path} is {type(source).__name__}, not a Soniq app")
    app.registry = source.registry
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setattr(source, "enqueue", app.enqueue)
    monkeypatch.setattr(source, "enqueue_many", app.enqueue_many)


def _close(app: Soniq) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(app.close())
    else:  # pragma: no cover - a sync fixture torn down inside a running loop
        app.close_sync()


def _run(work: Any) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(work)
    else:  # pragma: no cover - a sync fixture set up inside a running loop
        raise pytest.UsageError("the soniq_app fixture with --soniq-app-url cannot be set up inside a running loop")


async def _setup_namespace(url: str, namespace: str) -> None:
    with use_backend(url, namespace=namespace):
        app = make_app()
    try:
        await app.setup()
    finally:
        await app.close()


async def _drop_namespace(url: str, namespace: str) -> None:
    """Drop the test's namespace; on a backend without `SchemaAdmin` (nothing to drop it with) the
    namespace is left as it is."""
    with use_backend(url, namespace=namespace):
        app = make_app()
    try:
        backend = await app.connected_backend()
        if has_role(backend, SchemaAdmin):
            await features.schema_admin(backend).drop_schema()
    finally:
        await app.close()
    # A file store keeps each namespace in a file of its own (SQLite: ``db.<namespace>.db``): remove it too.
    path = getattr(getattr(app.backend, "location", None), "path", None)
    if isinstance(path, Path) and namespace in path.name:
        for leftover in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            leftover.unlink(missing_ok=True)


def _fixture_app(request: pytest.FixtureRequest, url: str | None) -> Iterator[Soniq]:
    namespace: str | None = None
    if url is None or url == MEMORY_URL:
        app = make_app()  # the in-memory store is private to its app already
    else:
        # A namespace per test, so a second test never drains the first test's jobs.
        namespace = f"{NAMESPACE_PREFIX}{uuid.uuid4().hex[:16]}"
        _run(_setup_namespace(url, namespace))
        with use_backend(url, namespace=namespace):
            app = make_app()
    try:
        _adopt(request, app)
        yield app
    finally:
        try:
            _close(app)
        finally:
            if url is not None and namespace is not None:
                _run(_drop_namespace(url, namespace))


@pytest.fixture
def soniq_app(request: pytest.FixtureRequest) -> Iterator[Soniq]:
    """A fresh Soniq app for one test (``--soniq-app-url`` chooses the store)."""
    url: Any = request.config.getoption("--soniq-app-url", default=None)
    yield from _fixture_app(request, url)


@pytest.fixture
def soniq_memory(request: pytest.FixtureRequest) -> Iterator[Soniq]:
    """A fresh Soniq app on the in-memory store, for one test."""
    yield from _fixture_app(request, MEMORY_URL)
