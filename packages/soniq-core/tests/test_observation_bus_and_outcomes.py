"""The observation bus and the job-end and recovery vocabulary, through public surfaces."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from soniq import (
    BaseObserver,
    HandlerKind,
    InMemoryMetricsSink,
    JobOutcome,
    Soniq,
    WorkerState,
)
from soniq.bus import ObservationBus
from soniq.observers import JobEndEvent, RecordingObserver
from soniq.params import ClaimJobsParams, RegisterWorkerParams
from soniq.records import StaleJobPolicy, WorkerInfo

pytestmark = pytest.mark.asyncio


async def test_a_hook_nobody_implements_is_never_called_and_job_events_are_not_built() -> None:
    class TransitionsOnly(BaseObserver):
        def __init__(self) -> None:
            self.seen: list[object] = []

        def on_transition(self, event: object) -> None:
            self.seen.append(event)

    quiet = ObservationBus([TransitionsOnly()])
    assert not quiet.wants_job_events
    assert quiet.wants("on_transition")
    assert not quiet.wants("on_nack")
    assert ObservationBus([], InMemoryMetricsSink()).wants_job_events


async def test_job_ends_carry_enum_outcomes_and_reasons_to_observers_and_the_sink(
    fast_settings: dict[str, Any],
) -> None:
    sink, observer = InMemoryMetricsSink(), RecordingObserver()
    app = Soniq("memory://", metrics_sink=sink, extra_observers=[observer], **fast_settings)

    @app.job(max_retries=0)
    async def fails() -> None:
        raise RuntimeError("boom")

    @app.job(max_retries=5, name="flaky")
    async def flaky() -> None:
        raise RuntimeError("again")

    @app.job
    def fine() -> int:
        return 1

    failing = await app.enqueue(fails)
    retried = await app.enqueue(flaky)
    ok = await app.enqueue(fine)
    worker = app.worker(run_once=True, install_signal_handlers=False)
    summary = await asyncio.wait_for(worker.run(), 10)
    assert summary.final_state is WorkerState.STOPPED
    ends: dict[str, list[JobEndEvent]] = {}
    for event in observer.job_ends:
        ends.setdefault(event.job.id, []).append(event)
    assert [(e.outcome, e.reason) for e in ends[failing]] == [(JobOutcome.DEAD_LETTER, "max_attempts")]
    assert (ends[retried][0].outcome, ends[retried][0].reason) == (JobOutcome.RETRY, "error")
    assert [(e.outcome, e.handler_kind) for e in ends[ok]] == [(JobOutcome.DONE, HandlerKind.SYNC)]
    # The sink hears the same strings it always did.
    assert {"dead_letter", "done", "retry"} <= {end["outcome"] for end in sink.ends}
    assert all(type(end["outcome"]) is JobOutcome for end in sink.ends)


async def test_a_sweep_that_wrote_something_is_published_with_core_s_rescues(fast_settings: dict[str, Any]) -> None:
    observer = RecordingObserver()
    app = Soniq("memory://", extra_observers=[observer], stale_job_policy="dead_letter", **fast_settings)

    @app.job
    async def anything() -> None: ...

    job_id = await app.enqueue(anything)
    backend: Any = app.backend
    await backend.register_worker(
        RegisterWorkerParams(WorkerInfo(id="gone", hostname="h", pid=1, queues=None, concurrency=1))
    )
    await backend.claim_jobs(ClaimJobsParams(worker_id="gone", queues=None, limit=1, mark_started=True))
    backend.age_worker("gone", 3600)
    assert app.settings.stale_job_policy is StaleJobPolicy.DEAD_LETTER
    result = await app.recover()
    assert result.dead_lettered == (job_id,)
    (event,) = observer.recoveries
    assert event.result == result
    assert [(r.job_id, r.action.value, r.reason) for r in event.rescues] == [(job_id, "dead_letter", "zombie")]
    assert await app.recover() == type(result)()
    assert len(observer.recoveries) == 1, "a sweep that wrote nothing is not an event"
