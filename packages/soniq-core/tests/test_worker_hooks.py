"""The worker's bus hooks around its life: `on_worker_started`, and `on_recovery` from its own sweep loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from soniq import BaseObserver, Soniq
from soniq.bus import ObservationBus
from soniq.observers import RecoveryEvent, WorkerStartedEvent
from soniq.params import ClaimJobsParams, RegisterWorkerParams
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


class OnlyTheOlderHooks:
    """A duck-typed third-party observer written before `on_worker_started` existed."""

    def __init__(self) -> None:
        self.stopped: list[str] = []

    def on_worker_stopped(self, worker_id: str) -> None:
        self.stopped.append(worker_id)


async def test_a_hook_an_observer_lacks_is_not_wanted() -> None:
    assert not ObservationBus([BaseObserver(), OnlyTheOlderHooks()]).wants("on_worker_started")
    assert ObservationBus([Hooks()]).wants("on_worker_started")


async def test_started_carries_the_app_and_the_worker_s_own_sweep_is_reported(
    fast_settings: dict[str, Any], wait_until: Any
) -> None:
    hooks, older = Hooks(), OnlyTheOlderHooks()
    app = Soniq("memory://", extra_observers=[hooks, older], **fast_settings)  # type: ignore[list-item]

    @app.job
    async def lost() -> None:
        return None

    job_id = await app.enqueue(lost)
    backend: Any = await app.connected_backend()
    # A worker that claimed the row and then died without a word.
    await backend.register_worker(
        RegisterWorkerParams(WorkerInfo(id="gone", hostname="h", pid=1, queues=None, concurrency=1))
    )
    claimed = await backend.claim_jobs(ClaimJobsParams(worker_id="gone", queues=None, limit=1, mark_started=True))
    assert [row.id for row in claimed] == [job_id]
    backend.age_worker("gone", 3600)
    worker = app.worker(queues=["default"], install_signal_handlers=False)
    task = asyncio.ensure_future(worker.run())
    try:
        await wait_until(lambda: hooks.recoveries, timeout=10)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
    (started,) = hooks.started
    assert started.reads is app
    assert started.settings is app.settings
    assert started.worker_id == worker.worker_id
    assert started.queues == ("default",)
    assert started.concurrency == worker.concurrency
    (recovery,) = hooks.recoveries
    assert recovery.worker_id == started.worker_id
    assert recovery.result.stale_workers == ("gone",)
    assert [(r.job_id, r.action.value) for r in recovery.rescues] == [(job_id, "requeue")]
    assert older.stopped == [started.worker_id]
    await app.close()
