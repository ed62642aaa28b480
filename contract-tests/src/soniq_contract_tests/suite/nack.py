"""`nack_job`: the seed's field set, fenced, idempotent."""

from __future__ import annotations

from datetime import timedelta

from soniq.backend import CancelJobParams, ClaimJobsParams, GetJobParams, JobStatus, NackJobParams
from soniq_contract_tests.harness import (
    MISSING_JOB_ID,
    ContractHarness,
    assert_between,
    complete_one,
    enqueue,
    enqueue_and_claim,
    enqueue_with_history,
    fields_except,
    must_get,
    utc_now,
)

NACK_FIELDS = ("status", "worker_id", "updated_at", "scheduled_at", "started_at")


class NackContract:
    async def test_nack_requeues_with_the_seed_field_set(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            long_ago = utc_now() - timedelta(hours=1)
            row = await enqueue_and_claim(backend, worker_id="w1", mark_started=True, scheduled_at=long_ago)
            before = utc_now()
            assert await backend.nack_job(NackJobParams(job_id=row.id, worker_id="w1")) is True
            after = utc_now()
            nacked = await must_get(backend, row.id)
            assert nacked.status is JobStatus.QUEUED
            assert nacked.worker_id is None
            assert nacked.started_at is None
            assert_between(nacked.updated_at, before, after, contract.slack(backend), "updated_at after nack")
            assert_between(nacked.scheduled_at, before, after, contract.slack(backend), "scheduled_at after nack")

    async def test_nack_preserves_attempts(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            failed_once = await enqueue_with_history(backend)
            assert failed_once.attempts == 1
            await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=[failed_once.queue], limit=1, mark_started=True)
            )
            assert await backend.nack_job(NackJobParams(job_id=failed_once.id, worker_id="w1")) is True
            nacked = await must_get(backend, failed_once.id)
            assert nacked.attempts == 1

    async def test_nack_preserves_last_error(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            failed_once = await enqueue_with_history(backend, error="ValueError: the first run failed")
            await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=[failed_once.queue], limit=1, mark_started=True)
            )
            assert await backend.nack_job(NackJobParams(job_id=failed_once.id, worker_id="w1")) is True
            nacked = await must_get(backend, failed_once.id)
            assert nacked.last_error == "ValueError: the first run failed"

    async def test_nack_leaves_every_other_field_alone(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(
                backend, worker_id="w1", args={"order": 7, "note": "keep"}, priority=3, max_attempts=9
            )
            assert await backend.nack_job(NackJobParams(job_id=claimed.id, worker_id="w1")) is True
            nacked = await must_get(backend, claimed.id)
            assert fields_except(nacked, *NACK_FIELDS) == fields_except(claimed, *NACK_FIELDS)

    async def test_nack_is_noop_unless_processing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queued = await enqueue(backend)
            done = await enqueue_and_claim(backend, worker_id="w1")
            assert await complete_one(backend, job_id=done.id, worker_id="w1", result=None)
            cancelled = await enqueue(backend)
            assert await backend.cancel_job(CancelJobParams(job_id=cancelled.id))
            for row_id in (queued.id, done.id, cancelled.id):
                before = await must_get(backend, row_id)
                assert await backend.nack_job(NackJobParams(job_id=row_id, worker_id="w1")) is False
                assert await must_get(backend, row_id) == before
            assert await backend.nack_job(NackJobParams(job_id=MISSING_JOB_ID, worker_id="w1")) is False
            assert await backend.get_job(GetJobParams(job_id=MISSING_JOB_ID)) is None

    async def test_nack_by_a_different_worker_is_noop(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="owner", mark_started=True)
            assert await backend.nack_job(NackJobParams(job_id=claimed.id, worker_id="intruder")) is False
            assert await must_get(backend, claimed.id) == claimed

    async def test_nack_is_idempotent(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="w1")
            assert await backend.nack_job(NackJobParams(job_id=claimed.id, worker_id="w1")) is True
            first = await must_get(backend, claimed.id)
            assert await backend.nack_job(NackJobParams(job_id=claimed.id, worker_id="w1")) is False
            assert await must_get(backend, claimed.id) == first

    async def test_nacked_row_is_claimable_again_at_once(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="w1", scheduled_at=utc_now() - timedelta(hours=2))
            assert await backend.nack_job(NackJobParams(job_id=claimed.id, worker_id="w1")) is True
            again = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w2", queues=[claimed.queue], limit=5, mark_started=False)
            )
            assert [row.id for row in again] == [claimed.id]
            assert again[0].worker_id == "w2"
            assert again[0].attempts == claimed.attempts
