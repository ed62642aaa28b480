"""Result retention and deleting jobs: `result_ttl = 0` and `delete_job`."""

from __future__ import annotations

from soniq.backend import CompleteJobsParams, DeleteJobParams, GetJobParams, JobResult, JobStatus, QueueStatsParams
from soniq_contract_tests.harness import MISSING_JOB_ID, ContractHarness, enqueue, enqueue_and_claim, must_get


class RetentionContract:
    async def test_a_result_with_delete_row_deletes_the_row_under_the_fence(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            gone = await enqueue_and_claim(backend, worker_id="w-ttl", mark_started=True)
            kept = await enqueue_and_claim(backend, worker_id="w-ttl", mark_started=True)
            lost = await enqueue_and_claim(backend, worker_id="w-other", mark_started=True)
            written = await backend.complete_jobs(
                CompleteJobsParams(
                    worker_id="w-ttl",
                    results=[
                        JobResult(job_id=gone.id, result={"n": 1}, delete_row=True),
                        JobResult(job_id=kept.id, result={"n": 2}),
                        JobResult(job_id=lost.id, result=None, delete_row=True),
                    ],
                )
            )
            assert written == {gone.id, kept.id}
            assert await backend.get_job(GetJobParams(job_id=gone.id)) is None
            assert (await must_get(backend, kept.id)).result == {"n": 2}
            still = await must_get(backend, lost.id)
            assert (still.status, still.worker_id) == (JobStatus.PROCESSING, "w-other")
            stats = await backend.queue_stats(QueueStatsParams())
            assert (stats.done, stats.processing, stats.total) == (1, 1, 2)

    async def test_delete_job_removes_a_row_in_any_status(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queued = await enqueue(backend)
            running = await enqueue_and_claim(backend, worker_id="w-del", mark_started=True)
            assert await backend.delete_job(DeleteJobParams(job_id=queued.id)) is True
            assert await backend.delete_job(DeleteJobParams(job_id=running.id)) is True
            assert await backend.delete_job(DeleteJobParams(job_id=queued.id)) is False
            assert await backend.delete_job(DeleteJobParams(job_id=MISSING_JOB_ID)) is False
            assert await backend.get_job(GetJobParams(job_id=queued.id)) is None
            assert (await backend.queue_stats(QueueStatsParams())).total == 0
            # The worker that ran it finds nothing to write.
            written = await backend.complete_jobs(
                CompleteJobsParams(worker_id="w-del", results=[JobResult(job_id=running.id, result=1)])
            )
            assert written == set()
            assert await backend.get_job(GetJobParams(job_id=running.id)) is None
