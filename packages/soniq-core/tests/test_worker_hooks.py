"""The optional worker hooks: `on_worker_started` and `on_recovery`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from soniq import BaseObserver, Soniq
from soniq.observers import RecoveryEvent, WorkerStartedEvent
from soniq.records import WorkerInfo

pytestmark = pytest.mark.asyncio


class Hooks(BaseObserver):
    def __init__(self) -> None:
        self.started: list[WorkerStartedEvent] = []
        self.recoveries: list[RecoveryEvent] = []

    def on_worker_started(self, event: WorkerStartedEvent) -> None:
        self.started.append(event)

    def on_recovery(self, event: RecoveryEvent) -> None:
        self.recoveries.append(event)


class OnlyTheRequiredHooks:
    """A third-party observer written before the optional hooks existed."""

    def __getattr__(self, name: str) -> Any:
        if name in ("on_worker_started", "on_recovery"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


async def test_started_carries_the_app_and_a_sweep_that_wrote_is_reported(
    fast_settings: dict[str, Any], wait_until: Any
) -> None:
    hooks = Hooks()
    app = Soniq("memory://", extra_observers=[hooks, OnlyTheRequiredHooks()], **fast_settings)  # type: ignore[list-item]

    @app.job
    async def lost() -> None:
        return None

    job_id = await app.enqueue(lost)
    backend = await app.connected_backend()
    # A worker that claimed the row and then died without a word.
    await backend.register_worker(worker=WorkerInfo(id="gone", hostname="h", pid=1, queues=None, concurrency=1))
    assert [r.id for r in await backend.claim_jobs(worker_id="gone", queues=None, limit=1, mark_started=True)] == [
        job_id
    ]
    task = asyncio.ensure_future(app.run_worker(install_signal_handlers=False))
    try:
        await wait_until(lambda: hooks.recoveries, timeout=10)
    finally:
        app.current_worker.request_stop()
        await asyncio.wait_for(task, 10)
    (started,) = hooks.started
    assert started.app is app
    assert started.worker_id == app.current_worker.worker_id
    (recovery,) = hooks.recoveries
    assert recovery.result.stale_workers == ("gone",)
    assert recovery.result.requeued == (job_id,)
    await app.close()
