"""`expire_unknown_jobs`: old queued rows of names nobody registers go to the dead-letter table.

Core decides when (every live worker reported its names and the timeout
passed); the backend moves exactly the rows that qualify, one by one, and
nothing else: not a row of a known name, not a young one, not one in any
status but `queued`.
"""

from __future__ import annotations

import asyncio
import time

from soniq.backend import (
    Backend,
    CancelJobParams,
    DeadLetterReason,
    ExpireUnknownJobsParams,
    GetDeadLetterParams,
    GetJobParams,
    JobRecord,
    JobStatus,
)
from soniq_contract_tests.harness import (
    ContractHarness,
    complete_one,
    enqueue,
    enqueue_and_claim,
    enqueue_with_history,
    must_get,
)

ERROR = "no live worker registers job 'gone.job' (checked for 0.0s)"
AGE_GAP_SECONDS = 1.0


async def _expire(backend: Backend, *, known: list[str], older_than: float = 0.0) -> set[str]:
    return await backend.expire_unknown_jobs(
        ExpireUnknownJobsParams(known_names=known, older_than=older_than, error=ERROR)
    )


async def _assert_dead_lettered_as_unknown(backend: Backend, before: JobRecord) -> None:
    assert await backend.get_job(GetJobParams(job_id=before.id)) is None, f"{before.id} is still in soniq_jobs"
    dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=before.id))
    assert dead is not None, f"{before.id} is not in the dead-letter table"
    assert dead.dead_letter_reason == DeadLetterReason.UNKNOWN_JOB.value
    assert dead.last_error == ERROR
    assert dead.attempts == before.attempts, "expiring an unknown job must not spend an attempt"
    assert (dead.job_name, dict(dead.args), dead.queue) == (before.job_name, dict(before.args), before.queue)


class ExpireUnknownJobsContract:
    async def test_expire_unknown_jobs_moves_queued_rows_of_unknown_names(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            fresh = await enqueue(backend, job_name="gone.job")
            failed_once = await enqueue_with_history(backend, job_name="gone.job", error="first try failed")
            known = await enqueue(backend, job_name="kept.job")
            moved = await _expire(backend, known=["kept.job", "other.job"])
            assert moved == {fresh.id, failed_once.id}
            await _assert_dead_lettered_as_unknown(backend, fresh)
            await _assert_dead_lettered_as_unknown(backend, failed_once)
            assert (await must_get(backend, known.id)).to_dict() == known.to_dict()

    async def test_expire_unknown_jobs_never_moves_a_row_that_is_not_queued(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            processing = await enqueue_and_claim(backend, worker_id="w1", job_name="gone.job", mark_started=True)
            done = await enqueue_and_claim(backend, worker_id="w1", job_name="gone.job")
            assert await complete_one(backend, job_id=done.id, worker_id="w1", result=None)
            cancelled = await enqueue(backend, job_name="gone.job")
            assert await backend.cancel_job(CancelJobParams(job_id=cancelled.id))
            rows = [await must_get(backend, row.id) for row in (processing, done, cancelled)]
            assert await _expire(backend, known=[]) == set()
            for row in rows:
                assert (await must_get(backend, row.id)).to_dict() == row.to_dict()
            assert {row.status for row in rows} == {JobStatus.PROCESSING, JobStatus.DONE, JobStatus.CANCELLED}

    async def test_expire_unknown_jobs_moves_only_rows_older_than_asked(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            old = await enqueue(backend, job_name="gone.job")
            old_created_by = time.monotonic()
            # A real age difference on the store's own clock; nothing else can make a row old.
            await asyncio.sleep(AGE_GAP_SECONDS)
            young_created_after = time.monotonic()
            young = await enqueue(backend, job_name="gone.job")
            now = time.monotonic()
            precision = backend.capabilities.timestamp_precision.total_seconds()
            old_age, young_age = now - old_created_by, now - young_created_after
            older_than = (old_age + young_age) / 2
            assert old_age - young_age > 2 * precision, "the two rows were not created far enough apart"
            assert await _expire(backend, known=[], older_than=older_than) == {old.id}
            await _assert_dead_lettered_as_unknown(backend, old)
            assert (await must_get(backend, young.id)).to_dict() == young.to_dict()

    async def test_expire_unknown_jobs_with_nothing_to_move_returns_an_empty_set(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            row = await enqueue(backend, job_name="kept.job")
            assert await _expire(backend, known=["kept.job"]) == set()
            assert await _expire(backend, known=[], older_than=3600.0) == set()
            assert (await must_get(backend, row.id)).status is JobStatus.QUEUED
