"""Dead-letter filters, bulk delete, stats and replay overrides (issue 12)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from soniq.backend import Backend
from soniq.params import (
    DeadLetterFilter,
    DeadLetterJobParams,
    DeadLetterStatsParams,
    DeleteDeadLettersParams,
    GetDeadLetterParams,
    ListDeadLetterParams,
    ReplayDeadLetterParams,
)
from soniq.records import DeadLetterRecord, JobStatus
from soniq_contract_tests.harness import ContractHarness, enqueue_and_claim, must_get, utc_now


async def _dead(backend: Backend, *, reason: str = "max_attempts", **fields: Any) -> DeadLetterRecord:
    row = await enqueue_and_claim(backend, worker_id="w-bulk", mark_started=True, **fields)
    assert await backend.dead_letter_job(
        DeadLetterJobParams(job_id=row.id, worker_id="w-bulk", error="gave up", reason=reason)
    )
    dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=row.id))
    assert dead is not None
    return dead


async def _replay(backend: Backend, job_id: str, **overrides: Any) -> str:
    new_id = await backend.replay_dead_letter(
        ReplayDeadLetterParams(job_id=job_id, new_job_id=str(uuid.uuid4()), scheduled_at=utc_now(), **overrides)
    )
    assert new_id is not None
    return new_id


def _ids(rows: list[DeadLetterRecord]) -> set[str]:
    return {row.id for row in rows}


class DeadLetterBulkContract:
    async def test_the_filter_selects_by_name_queue_reason_replay_and_date(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            mail = await _dead(backend, job_name="mail.send", queue="mail-dl")
            bill = await _dead(backend, job_name="bill.charge", queue="bill-dl", reason="non_retryable")
            other = await _dead(backend, job_name="mail.send", queue="bill-dl", reason="worker_lost")
            await _replay(backend, other.id)

            async def listed(**fields: Any) -> set[str]:
                params = ListDeadLetterParams(filter=DeadLetterFilter(**fields), limit=100)
                return _ids(await backend.list_dead_letter(params))

            assert await listed() == {mail.id, bill.id, other.id}
            assert await listed(job_names=["mail.send"]) == {mail.id, other.id}
            assert await listed(queues=["bill-dl"]) == {bill.id, other.id}
            assert await listed(reasons=["non_retryable", "worker_lost"]) == {bill.id, other.id}
            assert await listed(job_names=["mail.send"], queues=["bill-dl"]) == {other.id}
            assert await listed(resurrected=True) == {other.id}
            assert await listed(resurrected=False) == {mail.id, bill.id}
            assert await listed(moved_from=utc_now() + timedelta(hours=1)) == set()
            assert await listed(moved_to=utc_now() - timedelta(hours=1)) == set()
            window = await listed(moved_from=mail.moved_to_dead_letter_at, moved_to=other.moved_to_dead_letter_at)
            assert window == {mail.id, bill.id, other.id}
            page = await backend.list_dead_letter(
                ListDeadLetterParams(filter=DeadLetterFilter(job_names=["mail.send"]), limit=1, offset=1)
            )
            assert _ids(page) == {mail.id}  # newest first: `other` is on the first page

    async def test_bulk_delete_takes_bounded_batches_oldest_first(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            rows = [await _dead(backend, job_name="bulk.del", queue="bulk-dl") for _ in range(5)]
            keep = await _dead(backend, job_name="bulk.keep", queue="bulk-dl")
            wanted = DeadLetterFilter(job_names=["bulk.del"])
            first = await backend.delete_dead_letters(DeleteDeadLettersParams(filter=wanted, limit=2))
            assert first == {rows[0].id, rows[1].id}
            rest = await backend.delete_dead_letters(DeleteDeadLettersParams(filter=wanted, limit=10))
            assert rest == {row.id for row in rows[2:]}
            assert await backend.delete_dead_letters(DeleteDeadLettersParams(filter=wanted, limit=10)) == set()
            left = await backend.list_dead_letter(ListDeadLetterParams(queue="bulk-dl"))
            assert _ids(left) == {keep.id}

    async def test_stats_count_the_matching_rows(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            empty = await backend.dead_letter_stats(DeadLetterStatsParams())
            assert (empty.total, dict(empty.by_queue), empty.oldest_moved_at) == (0, {}, None)
            first = await _dead(backend, job_name="a.job", queue="s1")
            await _dead(backend, job_name="a.job", queue="s2", reason="worker_lost")
            last = await _dead(backend, job_name="b.job", queue="s2", reason="worker_lost")
            await _replay(backend, last.id)
            stats = await backend.dead_letter_stats(DeadLetterStatsParams())
            assert stats.total == 3
            assert dict(stats.by_job_name) == {"a.job": 2, "b.job": 1}
            assert dict(stats.by_queue) == {"s1": 1, "s2": 2}
            assert dict(stats.by_reason) == {"max_attempts": 1, "worker_lost": 2}
            assert stats.resurrected == 1
            assert stats.oldest_moved_at == first.moved_to_dead_letter_at
            assert stats.newest_moved_at == last.moved_to_dead_letter_at
            only = await backend.dead_letter_stats(DeadLetterStatsParams(filter=DeadLetterFilter(queues=["s2"])))
            assert (only.total, dict(only.by_job_name)) == (2, {"a.job": 1, "b.job": 1})

    async def test_replay_applies_overrides(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            dead = await _dead(backend, queue="replay-dl", priority=50, max_attempts=2)
            plain = await must_get(backend, await _replay(backend, dead.id))
            assert (plain.queue, plain.priority, plain.max_attempts, plain.attempts) == ("replay-dl", 50, 2, 0)
            changed = await must_get(
                backend,
                await _replay(backend, dead.id, queue="replay-other", priority=5, max_attempts=7, attempts=1),
            )
            assert (changed.queue, changed.priority, changed.max_attempts, changed.attempts) == (
                "replay-other",
                5,
                7,
                1,
            )
            assert changed.status is JobStatus.QUEUED
            again = await backend.get_dead_letter(GetDeadLetterParams(job_id=dead.id))
            assert again is not None
            assert again.resurrection_count == 2
