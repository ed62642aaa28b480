"""Pytest fixtures for apps that use Soniq. Enable in ``conftest.py``:

    pytest_plugins = ["soniq.testing.pytest_plugin"]

- `soniq_app`: a fresh app from `make_app()` (memory, unless ``--soniq-url`` or a
  `use_backend` block says otherwise), closed after the test.
- `soniq_memory`: the same on the in-memory store, always.
- ``@pytest.mark.soniq(app="pkg.module:app")`` gives either fixture the jobs of your own
  app, and points your app's ``enqueue`` / ``enqueue_many`` at the fixture for the test.

The fixtures are synchronous so they work with any async test runner; the app connects
on first use inside the test's event loop.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Iterator
from typing import Any

import pytest

from soniq.app import Soniq
from soniq.testing.helpers import MEMORY_URL, make_app, use_backend


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


def _fixture_app(request: pytest.FixtureRequest, url: str | None) -> Iterator[Soniq]:
    if url is None:
        app = make_app()
    else:
        with use_backend(url):
            app = make_app()
    _adopt(request, app)
    try:
        yield app
    finally:
        _close(app)


@pytest.fixture
def soniq_app(request: pytest.FixtureRequest) -> Iterator[Soniq]:
    """A fresh Soniq app for one test (``--soniq-app-url`` chooses the store)."""
    url: Any = request.config.getoption("--soniq-app-url", default=None)
    yield from _fixture_app(request, url)


@pytest.fixture
def soniq_memory(request: pytest.FixtureRequest) -> Iterator[Soniq]:
    """A fresh Soniq app on the in-memory store, for one test."""
    yield from _fixture_app(request, MEMORY_URL)
