"""The status rule, as far as it can be checked through the protocol.

The store must reject any status outside the four (a CHECK constraint in SQL,
a check in the write path elsewhere). The protocol has no operation that
writes an arbitrary status, so a generic suite cannot attempt the forbidden
write; what it can check is that every transition leaves one of the four
statuses, that the status filter agrees with the rows, and that cancel only
moves `queued` rows. Backend packages test the rejection itself in their own
tests (e.g. an INSERT with ``status = 'failed'`` must raise).
"""

from __future__ import annotations

from datetime import timedelta

from soniq.backend import (
    CancelJobParams,
    ClaimJobsParams,
    JobPageParams,
    JobStatus,
    NackJobParams,
    QueueStatsParams,
    RetryJobParams,
    SetWorkerStatusParams,
    SnoozeJobParams,
    WorkerStatus,
)
from soniq_contract_tests.harness import (
    MISSING_JOB_ID,
    ContractHarness,
    complete_one,
    enqueue,
    enqueue_and_claim,
    must_get,
    register,
    utc_now,
)


class StatusRuleContract:
    async def test_every_row_returned_has_one_of_the_four_statuses(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queued = await enqueue(backend)
            processing = await enqueue_and_claim(backend, worker_id="w1")
            done = await enqueue_and_claim(backend, worker_id="w1")
            await complete_one(backend, job_id=done.id, worker_id="w1", result=None)
            cancelled = await enqueue(backend)
            await backend.cancel_job(CancelJobParams(job_id=cancelled.id))
            nacked = await enqueue_and_claim(backend, worker_id="w1")
            await backend.nack_job(NackJobParams(job_id=nacked.id, worker_id="w1"))
            retried = await enqueue_and_claim(backend, worker_id="w1")
            await backend.retry_job(
                RetryJobParams(job_id=retried.id, worker_id="w1", error="x", scheduled_at=utc_now())
            )
            snoozed = await enqueue_and_claim(backend, worker_id="w1")
            await backend.snooze_job(
                SnoozeJobParams(job_id=snoozed.id, worker_id="w1", scheduled_at=utc_now() + timedelta(hours=1))
            )
            stats = await backend.queue_stats(QueueStatsParams())
            assert stats.total == 7
            assert (stats.queued, stats.processing, stats.done, stats.cancelled) == (4, 1, 1, 1)
            ids = [queued.id, processing.id, done.id, cancelled.id, nacked.id, retried.id, snoozed.id]
            rows = [await must_get(backend, job_id) for job_id in ids]
            for row in rows:
                assert type(row.status) is JobStatus, f"{row.id} has status {row.status!r}, not a JobStatus"
            assert {row.status for row in rows} == set(JobStatus)

    async def test_status_filter_returns_exactly_the_rows_in_that_status(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queued = await enqueue(backend)
            processing = await enqueue_and_claim(backend, worker_id="w1")
            done = await enqueue_and_claim(backend, worker_id="w1")
            await complete_one(backend, job_id=done.id, worker_id="w1", result=None)
            cancelled = await enqueue(backend)
            await backend.cancel_job(CancelJobParams(job_id=cancelled.id))
            expected = {
                JobStatus.QUEUED: [queued.id],
                JobStatus.PROCESSING: [processing.id],
                JobStatus.DONE: [done.id],
                JobStatus.CANCELLED: [cancelled.id],
            }
            for status, ids in expected.items():
                page = await backend.job_page(JobPageParams(statuses=[status]))
                assert [row.id for row in page.rows] == ids, status
                assert {row.status for row in page.rows} == {status}

    async def test_cancel_moves_only_queued_rows(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queued = await enqueue(backend)
            assert await backend.cancel_job(CancelJobParams(job_id=queued.id)) is True
            assert (await must_get(backend, queued.id)).status is JobStatus.CANCELLED
            assert await backend.cancel_job(CancelJobParams(job_id=queued.id)) is False
            processing = await enqueue_and_claim(backend, worker_id="w1")
            done = await enqueue_and_claim(backend, worker_id="w1")
            await complete_one(backend, job_id=done.id, worker_id="w1", result=None)
            done = await must_get(backend, done.id)
            for row in (processing, done):
                assert await backend.cancel_job(CancelJobParams(job_id=row.id)) is False
                assert await must_get(backend, row.id) == row
            assert await backend.cancel_job(CancelJobParams(job_id=MISSING_JOB_ID)) is False

    async def test_cancelled_row_is_never_claimed(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue(backend)
            assert await backend.cancel_job(CancelJobParams(job_id=row.id))
            assert (
                await backend.claim_jobs(ClaimJobsParams(worker_id="w1", queues=None, limit=5, mark_started=False))
                == []
            )

    async def test_every_worker_row_has_one_of_the_three_statuses(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            await register(backend, "a")
            await register(backend, "b")
            assert await backend.set_worker_status(SetWorkerStatusParams(worker_id="b", status=WorkerStatus.STOPPING))
            for worker in await backend.list_workers():
                assert type(worker.status) is WorkerStatus
            assert {w.id: w.status for w in await backend.list_workers()} == {
                "a": WorkerStatus.ACTIVE,
                "b": WorkerStatus.STOPPING,
            }
