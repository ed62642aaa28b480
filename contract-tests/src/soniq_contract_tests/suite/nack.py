"""`nack_job`: the seed's field set, fenced, idempotent; a shutdown nack counts in `shutdown_nacks`."""

from __future__ import annotations

from datetime import timedelta

from soniq.backend import CancelJobParams, ClaimJobsParams, GetJobParams, JobStatus, NackJobParams, RetryJobParams
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

    async def test_a_new_row_has_no_shutdown_nacks(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queued = await enqueue(backend)
            assert queued.shutdown_nacks == 0
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=[queued.queue], limit=1, mark_started=True)
            )
            assert [row.shutdown_nacks for row in claimed] == [0]

    async def test_nack_with_handler_started_adds_one_to_shutdown_nacks(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            for expected in (1, 2, 3):
                assert await backend.nack_job(NackJobParams(job_id=claimed.id, worker_id="w1", handler_started=True))
                nacked = await must_get(backend, claimed.id)
                assert (nacked.status, nacked.shutdown_nacks) == (JobStatus.QUEUED, expected)
                assert nacked.attempts == claimed.attempts
                again = await backend.claim_jobs(
                    ClaimJobsParams(worker_id="w1", queues=[claimed.queue], limit=1, mark_started=True)
                )
                assert [row.shutdown_nacks for row in again] == [expected], "the claim must return shutdown_nacks"

    async def test_nack_without_handler_started_leaves_shutdown_nacks(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            assert await backend.nack_job(NackJobParams(job_id=claimed.id, worker_id="w1", handler_started=True))
            await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=[claimed.queue], limit=1, mark_started=False)
            )
            assert await backend.nack_job(NackJobParams(job_id=claimed.id, worker_id="w1"))
            nacked = await must_get(backend, claimed.id)
            assert (nacked.status, nacked.shutdown_nacks) == (JobStatus.QUEUED, 1)

    async def test_only_a_shutdown_nack_changes_shutdown_nacks(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            assert await backend.nack_job(NackJobParams(job_id=claimed.id, worker_id="w1", handler_started=True))
            await backend.claim_jobs(
                ClaimJobsParams(worker_id="w2", queues=[claimed.queue], limit=1, mark_started=True)
            )
            assert await backend.retry_job(
                RetryJobParams(job_id=claimed.id, worker_id="w2", error="boom", scheduled_at=utc_now())
            )
            assert (await must_get(backend, claimed.id)).shutdown_nacks == 1, "a retry changed shutdown_nacks"
            await backend.claim_jobs(
                ClaimJobsParams(worker_id="w3", queues=[claimed.queue], limit=1, mark_started=True)
            )
            assert await complete_one(backend, job_id=claimed.id, worker_id="w3", result="ok")
            assert (await must_get(backend, claimed.id)).shutdown_nacks == 1, "a completion changed shutdown_nacks"

    async def test_a_fenced_out_shutdown_nack_changes_nothing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="owner", mark_started=True)
            assert (
                await backend.nack_job(NackJobParams(job_id=claimed.id, worker_id="intruder", handler_started=True))
                is False
            )
            assert await must_get(backend, claimed.id) == claimed
            assert await backend.nack_job(NackJobParams(job_id=claimed.id, worker_id="owner", handler_started=True))
            nacked = await must_get(backend, claimed.id)
            assert nacked.shutdown_nacks == 1
            assert (
                await backend.nack_job(NackJobParams(job_id=claimed.id, worker_id="owner", handler_started=True))
                is False
            ), "a second nack of a queued row must be a no-op"
            assert await must_get(backend, claimed.id) == nacked
            queued = await enqueue(backend)
            assert (
                await backend.nack_job(NackJobParams(job_id=queued.id, worker_id="owner", handler_started=True))
                is False
            )
            assert await must_get(backend, queued.id) == queued
