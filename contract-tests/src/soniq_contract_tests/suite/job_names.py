"""Claiming by job name (`ClaimJobsParams.job_names`) and the names a worker reports.

A worker that lacks a job's code must never take its row: rows of other names
are not claimed, not written and spend no attempt, whatever their priority.
"""

from __future__ import annotations

from soniq.backend import (
    Backend,
    ClaimJobsParams,
    EnqueueJobsParams,
    JobRecord,
    JobStatus,
    RegisterWorkerParams,
    WorkerInfo,
)
from soniq_contract_tests.harness import (
    ContractHarness,
    enqueue_with_history,
    must_get,
    new_job,
    unique_queue,
)


async def _snapshot(backend: Backend, rows: list[JobRecord]) -> dict[str, dict[str, object]]:
    return {row.id: (await must_get(backend, row.id)).to_dict() for row in rows}


async def _enqueue_named(backend: Backend, queue: str, *specs: tuple[str, int]) -> list[JobRecord]:
    """One row per (job name, priority), on `queue`, all due."""
    jobs = [new_job(job_name=name, priority=priority, queue=queue) for name, priority in specs]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    return [await must_get(backend, job.id) for job in jobs]


class JobNamesContract:
    async def test_claim_by_job_names_takes_only_those_names_in_priority_order(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("names")
            rows = await _enqueue_named(
                backend, queue, ("other.job", 1), ("mine.a", 30), ("other.job", 5), ("mine.b", 10), ("mine.a", 20)
            )
            others = [row for row in rows if row.job_name == "other.job"]
            untouched = await _snapshot(backend, others)
            claimed = await backend.claim_jobs(
                ClaimJobsParams(
                    worker_id="w1", queues=None, limit=10, mark_started=False, job_names=["mine.a", "mine.b"]
                )
            )
            assert [(row.job_name, row.priority) for row in claimed] == [
                ("mine.b", 10),
                ("mine.a", 20),
                ("mine.a", 30),
            ], "a claim by job names must keep priority order and take no other name"
            for row in claimed:
                assert (row.status, row.worker_id) == (JobStatus.PROCESSING, "w1")
            assert await _snapshot(backend, others) == untouched, "rows of other names must not be written at all"

    async def test_claim_by_job_names_reaches_rows_behind_many_of_other_names(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("behind")
            await _enqueue_named(backend, queue, *[("other.job", 1)] * 40)
            mine = await _enqueue_named(backend, queue, ("mine.job", 500), ("mine.job", 600))
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=[queue], limit=5, mark_started=False, job_names=["mine.job"])
            )
            assert [row.id for row in claimed] == [row.id for row in mine]

    async def test_claim_by_job_names_with_a_queues_filter_honours_both(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            wanted, elsewhere = unique_queue("wanted"), unique_queue("elsewhere")
            (hit, miss_name) = await _enqueue_named(backend, wanted, ("mine.job", 100), ("other.job", 50))
            (miss_queue,) = await _enqueue_named(backend, elsewhere, ("mine.job", 1))
            untouched = await _snapshot(backend, [miss_name, miss_queue])
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=[wanted], limit=10, mark_started=True, job_names=["mine.job"])
            )
            assert [row.id for row in claimed] == [hit.id]
            assert await _snapshot(backend, [miss_name, miss_queue]) == untouched

    async def test_claim_by_job_names_spends_no_attempt_of_other_names(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("attempts")
            failed_once = await enqueue_with_history(backend, job_name="other.job", queue=queue, priority=1)
            for _ in range(3):
                assert (
                    await backend.claim_jobs(
                        ClaimJobsParams(
                            worker_id="w1", queues=[queue], limit=10, mark_started=True, job_names=["mine.job"]
                        )
                    )
                    == []
                )
            after = await must_get(backend, failed_once.id)
            assert after.to_dict() == failed_once.to_dict()
            assert (after.status, after.attempts, after.last_error) == (JobStatus.QUEUED, 1, "boom")

    async def test_claim_with_no_job_names_claims_nothing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            (row,) = await _enqueue_named(backend, unique_queue(), ("mine.job", 100))
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=None, limit=10, mark_started=False, job_names=[])
            )
            assert claimed == []
            assert (await must_get(backend, row.id)).status is JobStatus.QUEUED

    async def test_claim_without_job_names_takes_every_name(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            rows = await _enqueue_named(backend, unique_queue(), ("a.job", 100), ("b.job", 100))
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=None, limit=10, mark_started=False)
            )
            assert sorted(row.id for row in claimed) == sorted(row.id for row in rows)

    async def test_worker_job_names_round_trip(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            names = ("billing.charge", "emails.send_welcome", "odd name \u00e9")
            await backend.register_worker(
                RegisterWorkerParams(
                    worker=WorkerInfo(id="w-named", hostname="h", pid=1, queues=("q",), concurrency=2, job_names=names)
                )
            )
            await backend.register_worker(
                RegisterWorkerParams(worker=WorkerInfo(id="w-silent", hostname="h", pid=2, queues=None, concurrency=1))
            )
            by_id = {row.id: row for row in await backend.list_workers()}
            assert sorted(by_id["w-named"].job_names or ()) == sorted(names)
            assert by_id["w-silent"].job_names is None, "a worker that reported no names must list job_names=None"
