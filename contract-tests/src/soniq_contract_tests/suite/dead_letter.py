"""Dead letters: the move (delete + insert in one step), replay (a fresh counted row), purge."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from soniq import Soniq
from soniq.backend import (
    Backend,
    ClaimJobsParams,
    DeadLetterJobParams,
    DeadLetterPageParams,
    GetDeadLetterParams,
    GetJobParams,
    JobRecord,
    JobStatus,
    PurgeDeadLetterParams,
    QueueStatsParams,
    ReplayDeadLetterParams,
)
from soniq_contract_tests.harness import (
    MISSING_JOB_ID,
    ContractHarness,
    assert_between,
    assert_same_time,
    enqueue_and_claim,
    enqueue_with_history,
    must_get,
    utc_now,
)


async def _dead_lettered(backend: Backend, **fields: Any) -> JobRecord:
    row = await enqueue_and_claim(backend, worker_id="w1", mark_started=True, **fields)
    assert await backend.dead_letter_job(
        DeadLetterJobParams(job_id=row.id, worker_id="w1", error="gave up", reason="max_attempts")
    )
    return row


class DeadLetterContract:
    async def test_dead_letter_moves_the_row_with_reason_error_and_attempts(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            failed_once = await enqueue_with_history(
                backend, args={"to": "ops@example.com"}, priority=7, max_attempts=2, queue="mail"
            )
            await backend.claim_jobs(ClaimJobsParams(worker_id="w1", queues=["mail"], limit=1, mark_started=True))
            before = utc_now()
            moved = await backend.dead_letter_job(
                DeadLetterJobParams(job_id=failed_once.id, worker_id="w1", error="SMTP said no", reason="max_attempts")
            )
            after = utc_now()
            assert moved is True
            assert await backend.get_job(GetJobParams(job_id=failed_once.id)) is None
            dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=failed_once.id))
            assert dead is not None
            assert (dead.job_name, dict(dead.args), dead.queue) == (
                failed_once.job_name,
                {"to": "ops@example.com"},
                "mail",
            )
            assert dead.attempts == 2
            assert dead.last_error == "SMTP said no"
            assert dead.dead_letter_reason == "max_attempts"
            assert (dead.max_attempts, dead.priority) == (2, 7)
            assert (dead.resurrection_count, dead.last_resurrection_at) == (0, None)
            assert_between(
                dead.moved_to_dead_letter_at, before, after, contract.slack(backend), "moved_to_dead_letter_at"
            )

    async def test_replay_creates_a_fresh_queued_row_with_a_new_id(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            original = await _dead_lettered(backend, args={"k": [1, 2]}, priority=5, max_attempts=4, queue="replays")
            new_id = str(uuid.uuid4())
            when = utc_now() + timedelta(minutes=10)
            before = utc_now()
            assert (
                await backend.replay_dead_letter(
                    ReplayDeadLetterParams(job_id=original.id, new_job_id=new_id, scheduled_at=when)
                )
                == new_id
            )
            after = utc_now()
            fresh = await must_get(backend, new_id)
            assert fresh.status is JobStatus.QUEUED
            assert (fresh.attempts, fresh.last_error, fresh.worker_id, fresh.result) == (0, None, None, None)
            assert (fresh.job_name, dict(fresh.args), fresh.queue) == (original.job_name, {"k": [1, 2]}, "replays")
            assert (fresh.priority, fresh.max_attempts) == (5, 4)
            assert_same_time(fresh.scheduled_at, when, backend.capabilities.timestamp_precision, "scheduled_at")
            assert await backend.get_job(GetJobParams(job_id=original.id)) is None
            dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=original.id))
            assert dead is not None
            assert dead.resurrection_count == 1
            assert_between(dead.last_resurrection_at, before, after, contract.slack(backend), "last_resurrection_at")

    async def test_replay_twice_counts_two_resurrections(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            original = await _dead_lettered(backend)
            first, second = str(uuid.uuid4()), str(uuid.uuid4())
            assert (
                await backend.replay_dead_letter(
                    ReplayDeadLetterParams(job_id=original.id, new_job_id=first, scheduled_at=utc_now())
                )
                == first
            )
            assert (
                await backend.replay_dead_letter(
                    ReplayDeadLetterParams(job_id=original.id, new_job_id=second, scheduled_at=utc_now())
                )
                == second
            )
            dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=original.id))
            assert dead is not None
            assert dead.resurrection_count == 2
            assert (await must_get(backend, first)).status is JobStatus.QUEUED
            assert (await must_get(backend, second)).status is JobStatus.QUEUED

    async def test_replay_of_a_missing_dead_letter_returns_none(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            new_id = str(uuid.uuid4())
            assert (
                await backend.replay_dead_letter(
                    ReplayDeadLetterParams(job_id=MISSING_JOB_ID, new_job_id=new_id, scheduled_at=utc_now())
                )
                is None
            )
            assert await backend.get_job(GetJobParams(job_id=new_id)) is None
            assert (await backend.queue_stats(QueueStatsParams())).total == 0

    async def test_purge_deletes_the_dead_letter_row(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            original = await _dead_lettered(backend)
            assert await backend.purge_dead_letter(PurgeDeadLetterParams(job_id=original.id)) is True
            assert await backend.get_dead_letter(GetDeadLetterParams(job_id=original.id)) is None
            assert (await backend.dead_letter_page(DeadLetterPageParams())).rows == []
            assert await backend.purge_dead_letter(PurgeDeadLetterParams(job_id=original.id)) is False
            assert (
                await backend.replay_dead_letter(
                    ReplayDeadLetterParams(job_id=original.id, new_job_id=str(uuid.uuid4()), scheduled_at=utc_now())
                )
                is None
            )

    async def test_purge_of_a_missing_dead_letter_returns_false(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            kept = await _dead_lettered(backend)
            assert await backend.purge_dead_letter(PurgeDeadLetterParams(job_id=MISSING_JOB_ID)) is False
            assert [row.id for row in (await backend.dead_letter_page(DeadLetterPageParams())).rows] == [kept.id]

    async def test_dead_letter_listing_filters_by_queue_most_recent_first(self, contract: ContractHarness) -> None:
        """`dead_letter_page` by queue, newest ``(moved_to_dead_letter_at, id)`` first, and
        ``app.dead_letter.list``'s offset pages, which core serves from it, in the same order."""
        async with contract.backend() as backend:
            moved = [await _dead_lettered(backend, queue=queue) for queue in ("a", "b", "a", "a")]
            all_rows = (await backend.dead_letter_page(DeadLetterPageParams())).rows
            assert sorted(row.id for row in all_rows) == sorted(row.id for row in moved)
            keys = [(row.moved_to_dead_letter_at, row.id) for row in all_rows]
            assert keys == sorted(keys, reverse=True)
            in_a = (await backend.dead_letter_page(DeadLetterPageParams(queues=["a"]))).rows
            assert sorted(row.id for row in in_a) == sorted(row.id for row in moved if row.queue == "a")
            app = Soniq(backend=backend, observers="")  # the harness closes the backend
            await app.connect()
            page_one = await app.dead_letter.list("a", limit=2, offset=0)
            page_two = await app.dead_letter.list("a", limit=2, offset=2)
            assert (len(page_one), len(page_two)) == (2, 1)
            assert [row["id"] for row in page_one + page_two] == [row.id for row in in_a]
            assert await app.dead_letter.list("a", offset=3) == []

    async def test_get_dead_letter_of_a_missing_id_returns_none(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            assert await backend.get_dead_letter(GetDeadLetterParams(job_id=MISSING_JOB_ID)) is None
