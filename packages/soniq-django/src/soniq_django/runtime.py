"""Soniq apps for Django: one per ``TASKS`` alias, built from its settings.

A worker process builds one long-lived app (its tasks registered as Soniq
jobs). Everything else that needs Soniq's API from synchronous Django code
(admin actions, ``soniq_setup``, ``soniq_status``) opens a short-lived app in
its own event loop, because an app's connections belong to the loop that
opened them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from soniq import Soniq
from soniq_django.config import BackendConfig, backend_config, database_url
from soniq_django.execution import register_tasks

T = TypeVar("T")


def build_app(config: BackendConfig, *, overrides: dict[str, Any] | None = None) -> Soniq:
    """A Soniq app on the backend's Django database, with the backend's Soniq settings."""
    return Soniq(database_url(config.database), **{**dict(config.soniq_settings), **(overrides or {})})


def build_worker_app(alias: str, *, overrides: dict[str, Any] | None = None) -> Soniq:
    """The app a worker runs: every task of `alias` that has been imported is registered as a job."""
    config = backend_config(alias)
    app = build_app(config, overrides=overrides)
    register_tasks(app, config)
    return app


def run_sync(coroutine_fn: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from synchronous code, even when an event loop is running here."""

    async def main() -> T:
        return await coroutine_fn()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, main()).result()


def with_app(alias: str, body: Callable[[Soniq], Awaitable[T]]) -> T:
    """Call `body` with a short-lived app for `alias`, closed afterwards."""

    async def run() -> T:
        async with build_app(backend_config(alias)) as app:
            return await body(app)

    return run_sync(run)
