from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

os.environ.setdefault("SONIQ_OBSERVERS", "")
# With --import-mode=importlib the tests folder is not importable by default; the helpers live in it.
sys.path.insert(0, str(Path(__file__).parent))

from dash_harness import Store, make_store, start_browser

from soniq import Soniq

JOB_NAMES = (
    "dash_jobs.quick",
    "dash_jobs.flaky",
    "dash_jobs.hold",
    "dash_jobs.login",
    "dash_jobs.charge",
    "dash_jobs.mint",
    "dash_jobs.report",
    "dash_jobs.log_then_fail",
)
# Jobs whose retry budget a test reads: registered with the `max_retries` the worker gives them.
RETRIED = {"dash_jobs.retry_later": 3, "dash_jobs.second_run": 2, "dash_jobs.always_fails": 1}


@pytest.fixture
def processes() -> Iterator[list[Any]]:
    """Dashboards and workers a test started; each is stopped after it."""
    started: list[Any] = []
    yield started
    for process in started:
        process.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return make_store(request.param, tmp_path)


def _stub(**kwargs: Any) -> None:
    raise AssertionError("runs in the worker process only")


@pytest_asyncio.fixture
async def producer(store: Store) -> AsyncIterator[Soniq]:
    """The enqueuing side, in the test process: the worker's jobs registered by name only."""
    from dash_jobs import EVIL_NAME

    app = store.app()
    for name in (*JOB_NAMES, EVIL_NAME):
        app.job(name=name, max_retries=0)(_stub)
    for name, retries in RETRIED.items():
        app.job(name=name, max_retries=retries)(_stub)
    await app.setup()
    yield app
    if store.namespace:
        await app.backend.drop_schema()
    await app.close()


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    driver = start_browser(tmp_path_factory.mktemp("chromium-profile"))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
