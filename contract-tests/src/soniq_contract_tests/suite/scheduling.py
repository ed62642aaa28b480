"""Due times and claim order: priority ascending, then scheduled_at, then created_at."""

from __future__ import annotations

import random
from datetime import timedelta

from soniq.backend import Backend, ClaimJobsParams, JobRecord
from soniq_contract_tests.harness import ContractHarness, enqueue, must_get, unique_queue, utc_now, wait_until


async def _claim_order(backend: Backend, queue: str) -> list[str]:
    order: list[str] = []
    while rows := await backend.claim_jobs(
        ClaimJobsParams(worker_id="w1", queues=[queue], limit=1, mark_started=False)
    ):
        order.extend(row.id for row in rows)
    return order


def _claim_key(row: JobRecord) -> tuple[object, ...]:
    return (row.priority, row.scheduled_at, row.created_at, row.id)


class SchedulingContract:
    async def test_future_job_is_not_claimed_before_it_is_due(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue(backend, scheduled_at=utc_now() + timedelta(hours=1))
            assert (
                await backend.claim_jobs(ClaimJobsParams(worker_id="w1", queues=None, limit=10, mark_started=False))
                == []
            )
            assert (
                await backend.claim_jobs(
                    ClaimJobsParams(worker_id="w1", queues=[row.queue], limit=10, mark_started=False)
                )
                == []
            )

    async def test_future_job_is_claimed_once_it_is_due(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            due_at = utc_now() + timedelta(seconds=0.3)
            row = await enqueue(backend, scheduled_at=due_at)
            claimed: list[str] = []

            async def claimed_yet() -> bool:
                rows = await backend.claim_jobs(
                    ClaimJobsParams(worker_id="w1", queues=None, limit=10, mark_started=False)
                )
                claimed.extend(r.id for r in rows)
                return bool(claimed)

            await wait_until(
                claimed_yet, deadline=10, interval=0.02, message="a job scheduled 0.3s ahead never became claimable"
            )
            assert claimed == [row.id]

    async def test_lower_priority_number_is_claimed_first(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue()
            when = utc_now() - timedelta(seconds=30)
            by_priority = {
                p: await enqueue(backend, queue=queue, priority=p, scheduled_at=when) for p in (300, 5, 100, -1)
            }
            assert await _claim_order(backend, queue) == [by_priority[p].id for p in (-1, 5, 100, 300)]

    async def test_equal_priority_is_claimed_by_scheduled_at(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue()
            now = utc_now()
            rows = {
                age: await enqueue(backend, queue=queue, scheduled_at=now - timedelta(seconds=age))
                for age in (10, 30, 20)
            }
            assert await _claim_order(backend, queue) == [rows[age].id for age in (30, 20, 10)]

    async def test_claim_order_is_priority_then_scheduled_at_then_created_at(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue()
            rng = random.Random(20240601)
            base = utc_now() - timedelta(minutes=5)
            ids = []
            for _ in range(12):
                row = await enqueue(
                    backend,
                    queue=queue,
                    priority=rng.choice((1, 50, 100)),
                    scheduled_at=base + timedelta(seconds=rng.choice((0, 10))),
                )
                ids.append(row.id)
            stored = [await must_get(backend, job_id) for job_id in ids]
            expected = [row.id for row in sorted(stored, key=_claim_key)]
            assert await _claim_order(backend, queue) == expected
