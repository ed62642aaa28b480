"""Ownership fencing: every write about a claimed row needs ``processing`` and the caller's worker id."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from soniq.backend import (
    Backend,
    ClaimJobsParams,
    DeadLetterJobParams,
    GetDeadLetterParams,
    GetJobParams,
    JobStatus,
    NackJobParams,
    QueueStatsParams,
    RetryJobParams,
    SnoozeJobParams,
)
from soniq_contract_tests.harness import (
    MISSING_JOB_ID,
    ContractHarness,
    complete_one,
    enqueue,
    enqueue_and_claim,
    mark_started_one,
    must_get,
    register,
    sweep_until_stale,
    utc_now,
)

FencedWrite = Callable[[Backend, str, str], Awaitable[bool]]


async def _complete(backend: Backend, job_id: str, worker_id: str) -> bool:
    return await complete_one(backend, job_id=job_id, worker_id=worker_id, result={"by": worker_id})


async def _retry(backend: Backend, job_id: str, worker_id: str) -> bool:
    later = utc_now() + timedelta(minutes=5)
    return await backend.retry_job(
        RetryJobParams(job_id=job_id, worker_id=worker_id, error=f"by {worker_id}", scheduled_at=later)
    )


async def _snooze(backend: Backend, job_id: str, worker_id: str) -> bool:
    return await backend.snooze_job(
        SnoozeJobParams(job_id=job_id, worker_id=worker_id, scheduled_at=utc_now() + timedelta(hours=1))
    )


async def _dead_letter(backend: Backend, job_id: str, worker_id: str) -> bool:
    return await backend.dead_letter_job(
        DeadLetterJobParams(job_id=job_id, worker_id=worker_id, error="by intruder", reason="max_attempts")
    )


async def _nack(backend: Backend, job_id: str, worker_id: str) -> bool:
    return await backend.nack_job(NackJobParams(job_id=job_id, worker_id=worker_id))


async def _mark_started(backend: Backend, job_id: str, worker_id: str) -> bool:
    return await mark_started_one(backend, job_id=job_id, worker_id=worker_id)


FENCED_WRITES: dict[str, FencedWrite] = {
    "complete": _complete,
    "retry": _retry,
    "snooze": _snooze,
    "dead_letter": _dead_letter,
    "nack": _nack,
    "mark_started": _mark_started,
}
fenced_write = pytest.mark.parametrize("write_name", sorted(FENCED_WRITES))


async def _assert_untouched(backend: Backend, before_id: str, expected: object, write_name: str) -> None:
    assert await backend.get_job(GetJobParams(job_id=before_id)) == expected, (
        f"{write_name} changed a row it did not own"
    )
    assert await backend.get_dead_letter(GetDeadLetterParams(job_id=before_id)) is None, (
        f"{write_name} dead-lettered a row it did not own"
    )


class FencingContract:
    @fenced_write
    async def test_fenced_write_by_a_non_owner_writes_nothing(self, contract: ContractHarness, write_name: str) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="owner", mark_started=False)
            assert await FENCED_WRITES[write_name](backend, claimed.id, "intruder") is False
            await _assert_untouched(backend, claimed.id, claimed, write_name)

    @fenced_write
    async def test_fenced_write_on_a_row_that_is_not_processing_writes_nothing(
        self, contract: ContractHarness, write_name: str
    ) -> None:
        async with contract.backend() as backend:
            queued = await enqueue(backend)
            finished = await enqueue_and_claim(backend, worker_id="owner")
            assert await complete_one(backend, job_id=finished.id, worker_id="owner", result=1)
            done = await must_get(backend, finished.id)
            for row in (queued, done):
                # The finished row's last owner is "owner": a stale id must not revive it either.
                assert await FENCED_WRITES[write_name](backend, row.id, "owner") is False
                await _assert_untouched(backend, row.id, row, write_name)

    @fenced_write
    async def test_fenced_write_on_a_missing_row_returns_false(
        self, contract: ContractHarness, write_name: str
    ) -> None:
        async with contract.backend() as backend:
            assert await FENCED_WRITES[write_name](backend, MISSING_JOB_ID, "owner") is False
            assert await backend.get_job(GetJobParams(job_id=MISSING_JOB_ID)) is None
            assert (await backend.queue_stats(QueueStatsParams())).total == 0

    async def test_worker_whose_row_was_recovered_and_reclaimed_cannot_overwrite_it(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            lost = await register(backend, "lost-worker")
            claimed = await enqueue_and_claim(backend, worker_id=lost, mark_started=True, max_attempts=5)
            await sweep_until_stale(contract, backend, stale_worker=lost)
            reclaimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="new-owner", queues=[claimed.queue], limit=1, mark_started=True)
            )
            assert [row.id for row in reclaimed] == [claimed.id]
            current = await must_get(backend, claimed.id)
            for write_name, write in sorted(FENCED_WRITES.items()):
                assert await write(backend, claimed.id, lost) is False, f"{write_name} by the lost worker succeeded"
                await _assert_untouched(backend, claimed.id, current, write_name)
            assert current.status is JobStatus.PROCESSING
            assert await complete_one(backend, job_id=claimed.id, worker_id="new-owner", result="mine") is True
            assert (await must_get(backend, claimed.id)).result == "mine"
