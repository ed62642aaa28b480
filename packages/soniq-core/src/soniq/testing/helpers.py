"""`make_app`, `drain` and `wait_until`: what a test of Soniq jobs needs, on a real worker."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from soniq.observers import BaseObserver, JobEndEvent, JobStartEvent
from soniq.outcomes import JobOutcome

if TYPE_CHECKING:
    from soniq.app import Soniq

MEMORY_URL = "memory://"

_default: dict[str, Any] = {"url": MEMORY_URL, "options": {}}


@contextlib.contextmanager
def use_backend(url: str, **backend_options: Any) -> Iterator[None]:
    """Within the block, `make_app()` builds apps on `url` (with `backend_options`) instead of memory.

    For running one test module against every backend from a fixture, without editing the tests.
    """
    saved = dict(_default)
    _default.update(url=url, options=dict(backend_options))
    try:
        yield
    finally:
        _default.clear()
        _default.update(saved)


def make_app(**settings: Any) -> Soniq:
    """A `Soniq` on a fresh in-memory store (no server, no file), with these settings.

    Keywords are the same as `Soniq(...)`'s; ``backend=`` and ``database_url=`` pick another
    store. Call ``await app.setup()`` before use on a store that needs a schema, or let
    `drain` and the producer API connect it.
    """
    from soniq.app import Soniq

    if "backend" not in settings and "database_url" not in settings:
        settings["database_url"] = _default["url"]
        options: Mapping[str, Any] = _default["options"]
        if options:
            settings["backend_options"] = {**options, **settings.get("backend_options", {})}
        if settings["database_url"] == MEMORY_URL:
            _require_memory_backend()
    return Soniq(**settings)


def _require_memory_backend() -> None:
    """Fail at the call, in words, when the in-memory store `make_app` defaults to is not installed."""
    from soniq.discovery import backend_class_for
    from soniq.errors import BackendNotFoundError

    try:
        backend_class_for(MEMORY_URL)
    except BackendNotFoundError:
        raise BackendNotFoundError(
            "soniq.testing.make_app() builds its app on the in-memory store, which is the soniq-memory "
            "distribution, and it is not installed: pip install soniq-memory (it is a test dependency: add it "
            "next to pytest), or pass make_app(database_url=...) / use soniq.testing.use_backend(url) for "
            "another store"
        ) from None


class _Recorder(BaseObserver):
    def __init__(self, limit: int | None, stop: Callable[[], None]) -> None:
        self.done: list[str] = []
        self.started = 0
        self._limit = limit
        self._stop = stop

    def on_job_start(self, event: JobStartEvent) -> None:
        self.started += 1
        if self._limit is not None and self.started >= self._limit:
            self._stop()  # the worker drains: this run finishes, nothing more is claimed

    def on_job_end(self, event: JobEndEvent) -> None:
        if event.outcome is JobOutcome.DONE:
            self.done.append(event.job.id)


async def drain(app: Soniq, max_jobs: int | None = None, *, queues: list[str] | None = None) -> list[Any]:
    """Run the jobs that are due now, one at a time, and return the successful ones' results in order.

    A real worker runs them (retries, snoozes, dead letters and hooks behave as in
    production) in the running event loop, with no signal handler installed. A job that
    fails and is retried later, or snoozes, is not due now, so it is left for the next call.
    With `max_jobs`, stops after starting that many.
    """
    if max_jobs is not None and (isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1):
        raise ValueError(f"max_jobs must be a whole number >= 1 or None, got {max_jobs!r}")
    await app.setup()
    recorder = _Recorder(max_jobs, lambda: worker.stop("drain max_jobs"))
    app.add_observer(recorder)  # before the worker is built: it takes the app's bus as it is then
    try:
        worker = app.worker(concurrency=1, queues=queues, run_once=True, install_signal_handlers=False)
        await worker.run()
    finally:
        app.observers.remove(recorder)
    results = []
    for job_id in recorder.done:
        job = await app.get_job(job_id)
        results.append(job["result"] if job is not None else None)
    return results


async def wait_until(
    predicate: Callable[[], Any | Awaitable[Any]],
    *,
    timeout: float = 5.0,
    poll: float = 0.01,
    message: str | None = None,
) -> Any:
    """Wait until `predicate()` (sync or async) returns something truthy, and return it.

    Raises `AssertionError` (with `message`, if given) once `timeout` seconds pass without it.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(message or f"wait_until: condition not met within {timeout:g}s ({predicate!r})")
        await asyncio.sleep(poll)
