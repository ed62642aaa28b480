"""A running worker keeps writing an outcome through a store outage of any length.

A Redis Cluster failover on a loaded machine outlasted the worker's fixed write retries once: the
worker gave up, the row stayed `processing` under a live owner, and stale recovery (rightly) never
touches a live owner's rows, so the job was stuck until the worker stopped. Here the store refuses
the done write more times than there are retry delays; the row must still end `done` while the
worker runs, and a worker told to stop during the outage must give up within its budget.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from soniq import Soniq
from soniq.errors import BackendUnavailableError
from soniq.worker import writes

pytestmark = pytest.mark.asyncio


class Outage:
    """Makes one store method fail as an unreachable store does, `failures` times or until ended."""

    def __init__(self, method: Any, failures: int | None) -> None:
        self.method = method
        self.failures = failures
        self.refused = 0
        self.ended = asyncio.Event()

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.ended.is_set() and (self.failures is None or self.refused < self.failures):
            self.refused += 1
            raise BackendUnavailableError("store unreachable (test outage)")
        return await self.method(*args, **kwargs)


async def _status(app: Soniq, job_id: str) -> str | None:
    row = await app.get_job(job_id)
    return None if row is None else str(row["status"])


async def test_a_done_write_outlasting_every_retry_delay_still_lands_while_the_worker_runs(
    fast_settings: dict[str, Any], wait_until: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes, "WRITE_RETRY_DELAYS", (0.01, 0.02))
    app = Soniq("memory://", **fast_settings)

    @app.job
    async def quick() -> str:
        return "ok"

    job_id = await app.enqueue(quick)
    outage = Outage(app.backend.complete_jobs, failures=12)  # six times the retry delays
    monkeypatch.setattr(app.backend, "complete_jobs", outage)
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    try:
        await wait_until(lambda: outage.refused >= 12, timeout=10)
        await wait_until(lambda: _is_done(app, job_id), timeout=10)
        row = await app.get_job(job_id)
        assert row is not None
        assert row["status"] == "done"
    finally:
        worker.stop("test")
        await asyncio.wait_for(task, 20)


async def _is_done(app: Soniq, job_id: str) -> bool:
    return await _status(app, job_id) == "done"


async def test_a_worker_stopped_during_an_endless_outage_gives_up_within_its_budget(
    fast_settings: dict[str, Any], wait_until: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes, "WRITE_RETRY_DELAYS", (0.01, 0.05))
    app = Soniq("memory://", **{**fast_settings, "prefetch_release_timeout": 1.0, "shutdown_timeout": 1.0})

    @app.job
    async def quick() -> str:
        return "ok"

    job_id = await app.enqueue(quick)
    outage = Outage(app.backend.complete_jobs, failures=None)
    monkeypatch.setattr(app.backend, "complete_jobs", outage)
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    await wait_until(lambda: outage.refused >= 20, timeout=10)
    worker.stop("test")
    # The write gives up once the stopping worker's budget is spent; the row is left for stale recovery.
    await asyncio.wait_for(task, 15)
    assert await _status(app, job_id) == "processing"


async def test_a_retry_lost_with_its_reply_is_not_applied_again_to_the_next_run(
    fast_settings: dict[str, Any], wait_until: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store applies the retry but the reply is lost; before the worker writes it again, the same
    # worker has claimed the requeued row for its next run. Writing the retry again would count a
    # second attempt and requeue the row under its own running handler.
    monkeypatch.setattr(writes, "WRITE_RETRY_DELAYS", (0.3,))
    app = Soniq("memory://", **{**fast_settings, "concurrency": 2})
    runs: list[int] = []
    written_again = asyncio.Event()

    @app.job(max_retries=3)
    async def flaky() -> str:
        runs.append(len(runs) + 1)
        if len(runs) == 1:
            raise RuntimeError("first run fails")
        # The next run is still going when the worker would write the lost retry again.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(written_again.wait(), 1.5)
        return "ok"

    real_retry = app.backend.retry_job
    calls = 0

    async def retry_whose_reply_is_lost(params: Any) -> bool:
        nonlocal calls
        calls += 1
        applied = await real_retry(params)
        if calls == 1:
            raise BackendUnavailableError("connection lost after the store applied the retry (test)")
        written_again.set()
        return applied

    monkeypatch.setattr(app.backend, "retry_job", retry_whose_reply_is_lost)
    job_id = await app.enqueue(flaky)
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    try:
        await wait_until(lambda: _is_done(app, job_id), timeout=10)
        row = await app.get_job(job_id)
        assert row is not None
        assert row["attempts"] == 1  # one failed run, counted once
        assert runs == [1, 2]
        assert calls == 1
    finally:
        worker.stop("test")
        await asyncio.wait_for(task, 20)
