"""Deduplicated enqueue: a `dedup_key` held by a queued row is never stored twice."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import timedelta

from soniq.backend import CancelJobParams, ClaimJobsParams, EnqueueJobsParams, GetJobParams, JobStatus, QueueStatsParams
from soniq_contract_tests.harness import ContractHarness, must_get, new_job, unique_queue, utc_now

RACING_INSTANCES = 4
"""Backend instances (their own connections) racing on one key, besides the test's own."""
RACERS_PER_INSTANCE = 8


def _key() -> str:
    return f"contract-key-{uuid.uuid4().hex[:12]}"


class DedupContract:
    async def test_a_queued_key_returns_the_existing_id_and_stores_nothing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key, queue = _key(), unique_queue()
            first = new_job(queue=queue, dedup_key=key, args={"n": 1}, producer_id="billing-api")
            stored = await backend.enqueue_jobs(EnqueueJobsParams(jobs=[first]))
            assert stored in (None, [first.id])
            second = new_job(queue=queue, dedup_key=key, args={"n": 2})
            assert await backend.enqueue_jobs(EnqueueJobsParams(jobs=[second])) == [first.id]
            assert (await backend.queue_stats(QueueStatsParams(queue=queue))).total == 1
            assert await backend.get_job(GetJobParams(job_id=second.id)) is None
            row = await must_get(backend, first.id)
            assert (dict(row.args), row.dedup_key, row.producer_id) == ({"n": 1}, key, "billing-api")

    async def test_a_scheduled_job_holds_its_key(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key, queue = _key(), unique_queue()
            later = new_job(queue=queue, dedup_key=key, scheduled_at=utc_now() + timedelta(hours=1))
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[later]))
            again = new_job(queue=queue, dedup_key=key)
            assert await backend.enqueue_jobs(EnqueueJobsParams(jobs=[again])) == [later.id]
            assert (await backend.queue_stats(QueueStatsParams(queue=queue))).queued == 1

    async def test_a_claim_releases_the_key(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key, queue = _key(), unique_queue()
            first = new_job(queue=queue, dedup_key=key)
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[first]))
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w-dedup", queues=[queue], limit=1, mark_started=True)
            )
            assert [row.id for row in claimed] == [first.id]
            second = new_job(queue=queue, dedup_key=key)
            assert await backend.enqueue_jobs(EnqueueJobsParams(jobs=[second])) in (None, [second.id])
            assert (await must_get(backend, second.id)).status is JobStatus.QUEUED
            assert (await must_get(backend, first.id)).status is JobStatus.PROCESSING

    async def test_a_cancelled_row_releases_the_key(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key, queue = _key(), unique_queue()
            first = new_job(queue=queue, dedup_key=key)
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[first]))
            assert await backend.cancel_job(CancelJobParams(job_id=first.id))
            second = new_job(queue=queue, dedup_key=key)
            assert await backend.enqueue_jobs(EnqueueJobsParams(jobs=[second])) in (None, [second.id])
            assert (await must_get(backend, second.id)).status is JobStatus.QUEUED

    async def test_a_batch_mixes_new_keyed_unkeyed_and_existing_jobs_in_order(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            held_key, new_key, queue = _key(), _key(), unique_queue()
            held = new_job(queue=queue, dedup_key=held_key)
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[held]))
            batch = [
                new_job(queue=queue),
                new_job(queue=queue, dedup_key=held_key),
                new_job(queue=queue, dedup_key=new_key),
                new_job(queue=queue),
            ]
            stored = await backend.enqueue_jobs(EnqueueJobsParams(jobs=batch))
            assert stored == [batch[0].id, held.id, batch[2].id, batch[3].id]
            assert (await backend.queue_stats(QueueStatsParams(queue=queue))).total == 4
            for job_id in (held.id, batch[0].id, batch[2].id, batch[3].id):
                assert (await must_get(backend, job_id)).queue == queue
            assert await backend.get_job(GetJobParams(job_id=batch[1].id)) is None

    async def test_producers_on_separate_instances_racing_one_key_store_exactly_one_row(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            key, queue = _key(), unique_queue()
            async with contextlib.AsyncExitStack() as stack:
                instances = [backend]
                if backend.capabilities.shared_across_processes:
                    instances += [
                        await stack.enter_async_context(contract.peer(backend)) for _ in range(RACING_INSTANCES)
                    ]
                jobs = [
                    new_job(queue=queue, dedup_key=key, args={"racer": n})
                    for n in range(len(instances) * RACERS_PER_INSTANCE)
                ]

                async def produce(index: int) -> str:
                    job = jobs[index]
                    stored = await instances[index % len(instances)].enqueue_jobs(EnqueueJobsParams(jobs=[job]))
                    assert stored is not None, "a backend that deduplicates must return the stored ids"
                    return stored[0]

                returned = await asyncio.gather(*(produce(n) for n in range(len(jobs))))
            stored_rows = (await backend.queue_stats(QueueStatsParams(queue=queue))).total
            assert stored_rows == 1, f"{stored_rows} rows stored for one key"
            (winner,) = set(returned)
            assert winner in {job.id for job in jobs}
            assert (await must_get(backend, winner)).dedup_key == key
