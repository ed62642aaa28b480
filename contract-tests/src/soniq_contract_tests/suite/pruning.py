"""Pruning: only finished rows past `expires_at` go, at most `limit` per call; dead letters by age."""

from __future__ import annotations

from datetime import datetime, timedelta

from soniq.backend import (
    Backend,
    CompleteJobsParams,
    DeadLetterJobParams,
    GetDeadLetterParams,
    GetJobParams,
    JobRecord,
    JobResult,
    JobStatus,
    PruneDeadLettersParams,
    PruneJobsParams,
)
from soniq_contract_tests.harness import (
    ContractHarness,
    enqueue,
    enqueue_and_claim,
    must_get,
    unique_queue,
    utc_now,
)

WORKER = "prune-worker"


async def finished(backend: Backend, *, expires_at: datetime | None, queue: str) -> JobRecord:
    """A `done` row with `expires_at` written by the completion."""
    row = await enqueue_and_claim(backend, worker_id=WORKER, mark_started=True, queue=queue)
    result = JobResult(job_id=row.id, result={"ok": 1}, expires_at=expires_at)
    written = await backend.complete_jobs(CompleteJobsParams(worker_id=WORKER, results=[result]))
    assert written == {row.id}
    return await must_get(backend, row.id)


async def exists(backend: Backend, job_id: str) -> bool:
    return await backend.get_job(GetJobParams(job_id=job_id)) is not None


class PruningContract:
    async def test_completion_stores_expires_at(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            when = utc_now().replace(microsecond=0) + timedelta(days=1)
            row = await finished(backend, expires_at=when, queue=unique_queue())
            assert (row.status, row.expires_at) == (JobStatus.DONE, when)
            kept = await finished(backend, expires_at=None, queue=unique_queue())
            assert kept.expires_at is None

    async def test_prune_deletes_only_finished_rows_past_expires_at(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue()
            now = utc_now()
            expired = [await finished(backend, expires_at=now - timedelta(minutes=m), queue=queue) for m in (1, 5)]
            fresh = await finished(backend, expires_at=now + timedelta(hours=1), queue=queue)
            forever = await finished(backend, expires_at=None, queue=queue)
            queued = await enqueue(backend, queue=queue)
            processing = await enqueue_and_claim(backend, worker_id="busy-worker")
            assert await backend.prune_jobs(PruneJobsParams(now=now, limit=100)) == 2
            for row in expired:
                assert not await exists(backend, row.id), f"expired done row {row.id} survived pruning"
            for row in (fresh, forever, queued, processing):
                assert await exists(backend, row.id), f"row {row.id} ({row.status.value}) was pruned"
            assert (await must_get(backend, processing.id)).status is JobStatus.PROCESSING
            assert await backend.prune_jobs(PruneJobsParams(now=now, limit=100)) == 0

    async def test_prune_respects_the_limit(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue()
            past = utc_now() - timedelta(minutes=1)
            rows = [await finished(backend, expires_at=past, queue=queue) for _ in range(5)]
            counts = [await backend.prune_jobs(PruneJobsParams(limit=2)) for _ in range(4)]
            assert counts == [2, 2, 1, 0]
            assert [await exists(backend, row.id) for row in rows] == [False] * 5

    async def test_prune_judges_expiry_by_the_given_now(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            soon = utc_now() + timedelta(hours=1)
            row = await finished(backend, expires_at=soon, queue=unique_queue())
            assert await backend.prune_jobs(PruneJobsParams(limit=10)) == 0  # the store's clock: not yet
            assert await backend.prune_jobs(PruneJobsParams(now=soon - timedelta(seconds=1), limit=10)) == 0
            assert await backend.prune_jobs(PruneJobsParams(now=soon, limit=10)) == 1
            assert not await exists(backend, row.id)

    async def test_prune_dead_letters_deletes_rows_moved_before_the_cutoff(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            moved = []
            for _ in range(3):
                row = await enqueue_and_claim(backend, worker_id=WORKER, mark_started=True)
                assert await backend.dead_letter_job(
                    DeadLetterJobParams(job_id=row.id, worker_id=WORKER, error="boom", reason="max_attempts")
                )
                moved.append(row.id)
            before_all = utc_now() - timedelta(hours=1)
            assert await backend.prune_dead_letters(PruneDeadLettersParams(before=before_all, limit=10)) == 0
            cutoff = utc_now() + timedelta(seconds=5)
            assert await backend.prune_dead_letters(PruneDeadLettersParams(before=cutoff, limit=2)) == 2
            assert await backend.prune_dead_letters(PruneDeadLettersParams(before=cutoff, limit=2)) == 1
            for job_id in moved:
                assert await backend.get_dead_letter(GetDeadLetterParams(job_id=job_id)) is None
