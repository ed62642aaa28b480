"""Dead-letter filters, bulk delete, stats and replay overrides."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from soniq.backend import (
    Backend,
    DeadLetterFilter,
    DeadLetterJobParams,
    DeadLetterPageParams,
    DeadLetterRecord,
    DeadLetterStatsParams,
    DeleteDeadLettersParams,
    GetDeadLetterParams,
    JobStatus,
    ReplayDeadLetterParams,
)
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


def _ids(rows: Sequence[DeadLetterRecord]) -> set[str]:
    return {row.id for row in rows}


class DeadLetterBulkContract:
    async def test_the_filter_selects_by_name_queue_reason_replay_and_date(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            mail = await _dead(backend, job_name="mail.send", queue="mail-dl")
            bill = await _dead(backend, job_name="bill.charge", queue="bill-dl", reason="non_retryable")
            other = await _dead(backend, job_name="mail.send", queue="bill-dl", reason="worker_lost")
            await _replay(backend, other.id)

            async def listed(**fields: Any) -> set[str]:
                wanted = DeadLetterPageParams(filter=DeadLetterFilter(**fields), limit=100)
                page = await backend.dead_letter_page(wanted)
                assert page.next_cursor is None
                return _ids(page.rows)

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
            mail_only = DeadLetterFilter(job_names=["mail.send"])
            first = await backend.dead_letter_page(DeadLetterPageParams(filter=mail_only, limit=1))
            assert _ids(first.rows) == {other.id}  # newest first
            assert first.next_cursor is not None
            second = await backend.dead_letter_page(
                DeadLetterPageParams(filter=mail_only, limit=1, before=first.next_cursor)
            )
            assert (_ids(second.rows), second.next_cursor) == ({mail.id}, None)
            # The page's own fields and the filter both apply.
            apart = await backend.dead_letter_page(
                DeadLetterPageParams(queues=["mail-dl"], filter=DeadLetterFilter(queues=["bill-dl"]))
            )
            assert apart.rows == []
            narrowed = await backend.dead_letter_page(
                DeadLetterPageParams(queues=["mail-dl", "bill-dl"], filter=DeadLetterFilter(queues=["bill-dl"]))
            )
            assert _ids(narrowed.rows) == {bill.id, other.id}
            never_replayed = await backend.dead_letter_page(
                DeadLetterPageParams(job_name_prefix="mail.", filter=DeadLetterFilter(resurrected=False))
            )
            assert _ids(never_replayed.rows) == {mail.id}
            span = DeadLetterFilter(moved_from=mail.moved_to_dead_letter_at, moved_to=other.moved_to_dead_letter_at)
            in_window = await backend.dead_letter_page(DeadLetterPageParams(filter=span, before=first.next_cursor))
            assert _ids(in_window.rows) == {mail.id, bill.id}  # below `other`, within the window

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
            left = await backend.dead_letter_page(DeadLetterPageParams(queues=["bulk-dl"]))
            assert _ids(left.rows) == {keep.id}

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
