"""`claim_jobs`: what a claim writes, which rows it may take, and that no row is handed out twice."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from soniq.backend import Backend, CancelJobParams, ClaimJobsParams, EnqueueJobsParams, JobStatus, QueueStatsParams
from soniq_contract_tests.harness import (
    BackendFactory,
    ContractHarness,
    assert_between,
    complete_one,
    enqueue,
    enqueue_and_claim,
    mark_started_one,
    must_get,
    new_job,
    unique_queue,
    utc_now,
)
from soniq_contract_tests.suite._claim_processes import started_claimer_processes

CONCURRENT_ROWS = 200
CONCURRENT_CLAIMERS = 16
CHILD_PROCESSES = 3


async def _claim_until_empty(backend: Backend, worker_id: str, queue: str) -> list[str]:
    claimed: list[str] = []
    while True:
        rows = await backend.claim_jobs(
            ClaimJobsParams(worker_id=worker_id, queues=[queue], limit=3, mark_started=False)
        )
        if not rows:
            return claimed
        for row in rows:
            if row.worker_id != worker_id or row.status is not JobStatus.PROCESSING:
                raise AssertionError(f"claim by {worker_id} returned {row!r}")
        claimed.extend(row.id for row in rows)


class ClaimContract:
    async def test_claim_marks_rows_processing_for_the_claimer(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            job = await enqueue(backend)
            before = utc_now()
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=None, limit=10, mark_started=False)
            )
            after = utc_now()
            assert [row.id for row in claimed] == [job.id]
            for row in (claimed[0], await must_get(backend, job.id)):
                assert row.status is JobStatus.PROCESSING
                assert row.worker_id == "w1"
                assert row.attempts == 0
                assert row.started_at is None
                assert_between(row.updated_at, before, after, contract.slack(backend), "updated_at after claim")

    async def test_claim_with_mark_started_sets_started_at(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            job = await enqueue(backend)
            before = utc_now()
            await backend.claim_jobs(ClaimJobsParams(worker_id="w1", queues=None, limit=1, mark_started=True))
            after = utc_now()
            assert_between(
                (await must_get(backend, job.id)).started_at, before, after, contract.slack(backend), "started_at"
            )

    async def test_mark_started_sets_started_at_of_a_claimed_row(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="w1", mark_started=False)
            assert claimed.started_at is None
            before = utc_now()
            assert await mark_started_one(backend, job_id=claimed.id, worker_id="w1") is True
            after = utc_now()
            started = await must_get(backend, claimed.id)
            assert_between(started.started_at, before, after, contract.slack(backend), "started_at")
            assert started.status is JobStatus.PROCESSING
            assert started.worker_id == "w1"

    async def test_claim_honours_the_queues_filter(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            rows = {name: await enqueue(backend, queue=name) for name in ("alpha", "beta", "gamma")}
            only_alpha = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=["alpha"], limit=10, mark_started=False)
            )
            assert [row.id for row in only_alpha] == [rows["alpha"].id]
            none_left = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=["alpha", "delta"], limit=10, mark_started=False)
            )
            assert none_left == []
            rest = await backend.claim_jobs(ClaimJobsParams(worker_id="w2", queues=None, limit=10, mark_started=False))
            assert sorted(row.id for row in rest) == sorted([rows["beta"].id, rows["gamma"].id])

    async def test_claim_honours_the_limit(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[new_job() for _ in range(5)]))
            first = await backend.claim_jobs(ClaimJobsParams(worker_id="w1", queues=None, limit=2, mark_started=False))
            second = await backend.claim_jobs(ClaimJobsParams(worker_id="w1", queues=None, limit=2, mark_started=False))
            third = await backend.claim_jobs(ClaimJobsParams(worker_id="w1", queues=None, limit=2, mark_started=False))
            assert [len(first), len(second), len(third)] == [2, 2, 1]
            assert len({row.id for row in first + second + third}) == 5
            assert (await backend.queue_stats(QueueStatsParams())).processing == 5

    async def test_claim_skips_rows_that_are_not_yet_due(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            later = await enqueue(backend, scheduled_at=utc_now() + timedelta(hours=1))
            due = await enqueue(backend, scheduled_at=utc_now() - timedelta(seconds=1))
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=None, limit=10, mark_started=False)
            )
            assert [row.id for row in claimed] == [due.id]
            assert (await must_get(backend, later.id)).status is JobStatus.QUEUED

    async def test_claim_never_takes_rows_that_are_not_queued(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            processing = await enqueue_and_claim(backend, worker_id="w1", queue="shared")
            done = await enqueue_and_claim(backend, worker_id="w1", queue="shared")
            assert await complete_one(backend, job_id=done.id, worker_id="w1", result=None)
            cancelled = await enqueue(backend, queue="shared")
            assert await backend.cancel_job(CancelJobParams(job_id=cancelled.id))
            assert (
                await backend.claim_jobs(ClaimJobsParams(worker_id="w2", queues=None, limit=10, mark_started=False))
                == []
            )
            assert (await must_get(backend, processing.id)).worker_id == "w1"

    async def test_claim_with_limit_zero_claims_nothing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            await enqueue(backend)
            assert (
                await backend.claim_jobs(ClaimJobsParams(worker_id="w1", queues=None, limit=0, mark_started=False))
                == []
            )
            assert (await backend.queue_stats(QueueStatsParams())).queued == 1

    async def test_claim_is_exclusive_under_concurrent_claimers(
        self, contract: ContractHarness, soniq_backend_factory: BackendFactory
    ) -> None:
        """Every row is claimed exactly once by many concurrent claimers (and, for backends
        shared across processes, by claimers on other backend instances and OS processes)."""
        async with contract.backend() as backend:
            queue = unique_queue("race")
            jobs = [new_job(queue=queue) for _ in range(CONCURRENT_ROWS)]
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
            shared = backend.capabilities.shared_across_processes
            async with contextlib.AsyncExitStack() as stack:
                instances = [backend]
                if shared:
                    instances += [await stack.enter_async_context(contract.peer(backend)) for _ in range(2)]
                children = (
                    await stack.enter_async_context(
                        started_claimer_processes(
                            soniq_backend_factory, contract.namespace_of(backend), queue, count=CHILD_PROCESSES
                        )
                    )
                    if shared
                    else None
                )
                claimers = [
                    _claim_until_empty(instances[n % len(instances)], f"claimer-{n}", queue)
                    for n in range(CONCURRENT_CLAIMERS)
                ]
                if children is not None:
                    children.go()
                in_process = await asyncio.gather(*claimers)
                from_children = await children.collect() if children is not None else []
            owners: dict[str, list[str]] = {}
            for worker_id, ids in [
                *zip((f"claimer-{n}" for n in range(CONCURRENT_CLAIMERS)), in_process, strict=True),
                *from_children,
            ]:
                for job_id in ids:
                    owners.setdefault(job_id, []).append(worker_id)
            twice = {job_id: who for job_id, who in owners.items() if len(who) > 1}
            assert twice == {}, f"{len(twice)} rows were handed to more than one claimer"
            assert sorted(owners) == sorted(job.id for job in jobs)
            for job_id, (worker_id,) in owners.items():
                row = await must_get(backend, job_id)
                assert (row.status, row.worker_id) == (JobStatus.PROCESSING, worker_id)
            stats = await backend.queue_stats(QueueStatsParams(queue=queue))
            assert (stats.processing, stats.total) == (CONCURRENT_ROWS, CONCURRENT_ROWS), stats
