"""The owner's own fenced writes: complete, retry, snooze, each writing exactly its fields."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from soniq.backend import (
    Backend,
    ClaimJobsParams,
    CompleteJobsParams,
    GetJobParams,
    JobResult,
    JobStatus,
    RetryJobParams,
    SnoozeJobParams,
)
from soniq_contract_tests.harness import (
    ContractHarness,
    assert_between,
    assert_same_time,
    complete_one,
    enqueue,
    enqueue_and_claim,
    enqueue_with_history,
    must_get,
    utc_now,
)


async def _complete_many(backend: Backend, worker_id: str, results: list[tuple[str, Any]]) -> set[str]:
    return await backend.complete_jobs(
        CompleteJobsParams(worker_id=worker_id, results=[JobResult(job_id=job_id, result=r) for job_id, r in results])
    )


class SettleContract:
    async def test_batched_completion_writes_only_the_rows_the_worker_owns(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            mine = [await enqueue_and_claim(backend, worker_id="w1", mark_started=True) for _ in range(3)]
            theirs = await enqueue_and_claim(backend, worker_id="w2", mark_started=True)
            queued = await enqueue(backend)
            missing = str(uuid.uuid4())
            results: list[tuple[str, Any]] = [
                (mine[0].id, {"n": 0}),
                (theirs.id, "not yours"),
                (mine[1].id, [1, "two"]),
                (queued.id, "not claimed"),
                (missing, "no such row"),
                (mine[2].id, None),
            ]
            assert await _complete_many(backend, "w1", results) == {row.id for row in mine}
            for row, expected in zip(mine, ({"n": 0}, [1, "two"], None), strict=True):
                done = await must_get(backend, row.id)
                assert (done.status, done.result, done.worker_id) == (JobStatus.DONE, expected, None)
            assert await must_get(backend, theirs.id) == theirs
            assert await must_get(backend, queued.id) == queued
            assert await backend.get_job(GetJobParams(job_id=missing)) is None
            assert await _complete_many(backend, "w1", [(mine[0].id, "again")]) == set()
            assert (await must_get(backend, mine[0].id)).result == {"n": 0}

    async def test_complete_marks_done_stores_the_result_and_clears_the_owner(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            before = utc_now()
            assert await complete_one(backend, job_id=claimed.id, worker_id="w1", result={"sent": 3}) is True
            after = utc_now()
            done = await must_get(backend, claimed.id)
            assert done.status is JobStatus.DONE
            assert done.result == {"sent": 3}
            assert done.worker_id is None
            assert done.attempts == 0
            assert_between(done.updated_at, before, after, contract.slack(backend), "updated_at")
            assert await complete_one(backend, job_id=claimed.id, worker_id="w1", result="again") is False

    async def test_retry_counts_an_attempt_and_requeues_at_the_given_time(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            later = utc_now() + timedelta(hours=1)
            assert await backend.retry_job(
                RetryJobParams(job_id=claimed.id, worker_id="w1", error="E: boom", scheduled_at=later)
            )
            retried = await must_get(backend, claimed.id)
            assert retried.status is JobStatus.QUEUED
            assert (retried.attempts, retried.last_error, retried.worker_id, retried.started_at) == (
                1,
                "E: boom",
                None,
                None,
            )
            assert_same_time(retried.scheduled_at, later, backend.capabilities.timestamp_precision, "scheduled_at")
            assert (
                await backend.claim_jobs(
                    ClaimJobsParams(worker_id="w2", queues=[claimed.queue], limit=1, mark_started=False)
                )
                == []
            )

    async def test_snooze_requeues_without_spending_an_attempt(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            failed_once = await enqueue_with_history(backend, error="first failure")
            await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=[failed_once.queue], limit=1, mark_started=True)
            )
            later = utc_now() + timedelta(minutes=30)
            assert (
                await backend.snooze_job(SnoozeJobParams(job_id=failed_once.id, worker_id="w1", scheduled_at=later))
                is True
            )
            snoozed = await must_get(backend, failed_once.id)
            assert snoozed.status is JobStatus.QUEUED
            assert (snoozed.attempts, snoozed.last_error, snoozed.worker_id) == (1, "first failure", None)
            assert_same_time(snoozed.scheduled_at, later, backend.capabilities.timestamp_precision, "scheduled_at")

    async def test_settling_writes_leave_identity_fields_alone(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="w1", args={"a": 1}, priority=9, max_attempts=4)
            assert await complete_one(backend, job_id=claimed.id, worker_id="w1", result=None)
            done = await must_get(backend, claimed.id)
            kept = (
                "id",
                "job_name",
                "args",
                "queue",
                "priority",
                "max_attempts",
                "created_at",
                "trace_context",
                "scheduled_at",
                "attempts",
                "last_error",
            )
            assert {k: done.to_dict()[k] for k in kept} == {k: claimed.to_dict()[k] for k in kept}
