"""The dashboard reads: `job_counts`, `job_activity`, `job_page`, `dead_letter_page`, `queue_names`,
and the worker state that `set_worker_status` stores."""

from __future__ import annotations

import itertools
from datetime import timedelta

from soniq.backend import (
    Backend,
    CancelJobParams,
    DeadLetterJobParams,
    DeadLetterPageParams,
    JobActivityParams,
    JobCountsParams,
    JobCursor,
    JobPageParams,
    JobStatus,
    QueueStatsParams,
    RegisterWorkerParams,
    SetWorkerStatusParams,
    WorkerStatus,
)
from soniq_contract_tests.harness import (
    ContractHarness,
    complete_one,
    enqueue,
    enqueue_and_claim,
    register,
    unique_queue,
    utc_now,
    worker_info,
)


async def _dead(backend: Backend, *, queue: str, job_name: str = "contract.job", reason: str = "max_attempts") -> str:
    row = await enqueue_and_claim(backend, worker_id="w1", queue=queue, job_name=job_name)
    assert await backend.dead_letter_job(
        DeadLetterJobParams(job_id=row.id, worker_id="w1", error="boom", reason=reason)
    )
    return row.id


class ReadsContract:
    async def test_job_counts_add_up_per_queue_and_agree_with_queue_stats(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            a, b = sorted((unique_queue("a"), unique_queue("b")))
            await enqueue(backend, queue=a)
            await enqueue(backend, queue=a, scheduled_at=utc_now() + timedelta(hours=1))
            processing = await enqueue_and_claim(backend, worker_id="w1", queue=b)
            done = await enqueue_and_claim(backend, worker_id="w1", queue=b)
            assert await complete_one(backend, job_id=done.id, worker_id="w1", result=None)
            cancelled = await enqueue(backend, queue=b, scheduled_at=utc_now() + timedelta(hours=1))
            assert await backend.cancel_job(CancelJobParams(job_id=cancelled.id))
            await _dead(backend, queue=b)
            counts = await backend.job_counts(JobCountsParams())
            assert [c.queue for c in counts] == [a, b]
            first, second = counts
            assert (first.total, first.queued, first.scheduled) == (2, 2, 1)
            assert first.oldest_queued_at is not None
            assert first.oldest_due_at is not None
            assert (second.processing, second.done, second.cancelled, second.dead_letter, second.queued) == (
                1,
                1,
                1,
                1,
                0,
            )
            assert (second.oldest_queued_at, second.oldest_due_at) == (None, None)
            assert second.scheduled == 0
            for c in counts:
                assert c.total == c.queued + c.processing + c.done + c.dead_letter + c.cancelled
                stats = await backend.queue_stats(QueueStatsParams(queue=c.queue))
                assert (c.total, c.queued, c.processing, c.done, c.dead_letter, c.cancelled) == (
                    stats.total,
                    stats.queued,
                    stats.processing,
                    stats.done,
                    stats.dead_letter,
                    stats.cancelled,
                )
            assert processing.queue == b
            (only,) = await backend.job_counts(JobCountsParams(queues=["nobody-uses-this"]))
            assert (only.queue, only.total, only.oldest_queued_at) == ("nobody-uses-this", 0, None)

    async def test_oldest_due_at_leaves_out_rows_scheduled_for_later(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue()
            later = await enqueue(backend, queue=queue, scheduled_at=utc_now() + timedelta(hours=1))
            (only_later,) = await backend.job_counts(JobCountsParams(queues=[queue]))
            assert (only_later.oldest_queued_at, only_later.oldest_due_at) == (later.created_at, None)
            due = await enqueue(backend, queue=queue)
            (both,) = await backend.job_counts(JobCountsParams(queues=[queue]))
            assert (both.queued, both.scheduled) == (2, 1)
            assert (both.oldest_queued_at, both.oldest_due_at) == (later.created_at, due.created_at)

    async def test_job_page_never_repeats_or_skips_while_rows_are_inserted(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue()
            existing = [(await enqueue(backend, queue=queue)).id for _ in range(11)]
            seen: list[str] = []
            cursor: JobCursor | None = None
            for _ in range(20):
                page = await backend.job_page(JobPageParams(queues=[queue], before=cursor, limit=3))
                assert len(page.rows) <= 3
                seen.extend(row.id for row in page.rows)
                await enqueue(backend, queue=queue)  # newer than every cursor: never shown on later pages
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert len(seen) == len(set(seen)), f"a row repeated: {seen}"
            assert set(seen) == set(existing)
            stored = [await backend.job_page(JobPageParams(queues=[queue], job_name=None, search=i)) for i in seen]
            keys = [(p.rows[0].created_at, p.rows[0].id) for p in stored]
            assert keys == sorted(keys, reverse=True), "pages are not newest (created_at, id) first"

    async def test_job_page_filters(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue, other = unique_queue(), unique_queue()
            done = await enqueue_and_claim(backend, worker_id="w1", queue=queue, job_name="mail.send")
            assert await complete_one(backend, job_id=done.id, worker_id="w1", result={"sent": True})
            mail = await enqueue(backend, queue=queue, job_name="mail.send")
            mail2 = await enqueue(backend, queue=queue, job_name="mail.bounce")
            report = await enqueue(backend, queue=other, job_name="report.build")

            async def ids(**fields: object) -> set[str]:
                page = await backend.job_page(JobPageParams(queues=[queue, other], limit=50, **fields))  # type: ignore[arg-type]
                return {row.id for row in page.rows}

            assert await ids() == {mail.id, mail2.id, report.id, done.id}
            assert await ids(statuses=[JobStatus.DONE]) == {done.id}
            assert await ids(statuses=[JobStatus.QUEUED]) == {mail.id, mail2.id, report.id}
            assert await ids(job_name="mail.send") == {mail.id, done.id}
            assert await ids(job_name_prefix="mail.") == {mail.id, mail2.id, done.id}
            assert await ids(search=report.id) == {report.id}
            assert await ids(search="report.") == {report.id}
            only_other = await backend.job_page(JobPageParams(queues=[other]))
            assert [r.id for r in only_other.rows] == [report.id]
            assert only_other.next_cursor is None
            plain = await backend.job_page(JobPageParams(queues=[queue], statuses=[JobStatus.DONE]))
            assert plain.rows[0].result is None
            full = await backend.job_page(
                JobPageParams(queues=[queue], statuses=[JobStatus.DONE], include_results=True)
            )
            assert full.rows[0].result == {"sent": True}

    async def test_dead_letter_page_pages_and_filters(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue, other = unique_queue(), unique_queue()
            ids = [await _dead(backend, queue=queue, job_name="mail.send") for _ in range(5)]
            zombie = await _dead(backend, queue=other, job_name="report.build", reason="zombie")
            seen: list[str] = []
            cursor: JobCursor | None = None
            while True:
                page = await backend.dead_letter_page(DeadLetterPageParams(queues=[queue], before=cursor, limit=2))
                seen.extend(r.id for r in page.rows)
                await _dead(backend, queue=queue, job_name="mail.send")
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
            assert sorted(seen) == sorted(ids)
            assert len(seen) == len(set(seen))
            both = [queue, other]
            by_reason = await backend.dead_letter_page(DeadLetterPageParams(queues=both, reasons=["zombie"]))
            assert [r.id for r in by_reason.rows] == [zombie]
            by_name = await backend.dead_letter_page(DeadLetterPageParams(queues=both, job_name_prefix="report"))
            assert [r.id for r in by_name.rows] == [zombie]
            by_id = await backend.dead_letter_page(DeadLetterPageParams(search=zombie))
            assert [r.id for r in by_id.rows] == [zombie]

    async def test_job_activity_counts_done_and_dead_lettered_rows_in_buckets(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue()
            since = utc_now() - timedelta(minutes=10)
            for _ in range(3):
                row = await enqueue_and_claim(backend, worker_id="w1", queue=queue)
                assert await complete_one(backend, job_id=row.id, worker_id="w1", result=None)
            await _dead(backend, queue=queue)
            await _dead(backend, queue=unique_queue())
            buckets = await backend.job_activity(JobActivityParams(since=since, bucket_seconds=60, queue=queue))
            assert len(buckets) >= 10
            assert buckets[0].start == since
            for earlier, later in itertools.pairwise(buckets):
                assert later.start - earlier.start == timedelta(seconds=60)
            assert sum(b.done for b in buckets) == 3
            assert sum(b.dead_lettered for b in buckets) == 1
            assert buckets[-1].done + buckets[-2].done == 3, "the rows finished just now land in the last buckets"
            everywhere = await backend.job_activity(JobActivityParams(since=since, bucket_seconds=600))
            assert sum(b.dead_lettered for b in everywhere) == 2

    async def test_queue_names_lists_every_queue_of_a_job_or_dead_letter_once(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            jobs, dead = unique_queue("j"), unique_queue("d")
            await enqueue(backend, queue=jobs)
            await enqueue(backend, queue=jobs)
            await _dead(backend, queue=dead)
            names = await backend.queue_names()
            assert names == sorted(set(names))
            assert {jobs, dead} <= set(names)

    async def test_worker_state_and_last_shutdown_round_trip(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            worker_id = await register(backend)
            (row,) = await backend.list_workers()
            assert (row.state, row.state_changed_at, row.last_shutdown) == (None, None, None)
            status = WorkerStatus.STOPPING
            assert await backend.set_worker_status(SetWorkerStatusParams(worker_id, status, state="DRAINING"))
            (row,) = await backend.list_workers()
            assert row.state == "DRAINING"
            assert row.state_changed_at is not None
            assert row.status is status
            assert await backend.set_worker_status(SetWorkerStatusParams(worker_id, status))
            (kept,) = await backend.list_workers()
            assert kept.state == "DRAINING", "a write without state leaves the stored state"
            summary = {"states": [{"state": "DRAINING", "at": "2026-01-01T00:00:00+00:00"}], "nacked": ["j1"]}
            stopped = SetWorkerStatusParams(worker_id, WorkerStatus.STOPPED, state="STOPPED", last_shutdown=summary)
            assert await backend.set_worker_status(stopped)
            (row,) = await backend.list_workers()
            assert (row.state, row.status, row.last_shutdown) == ("STOPPED", WorkerStatus.STOPPED, summary)
            await backend.register_worker(RegisterWorkerParams(worker=worker_info(worker_id)))
            (fresh,) = await backend.list_workers()
            assert (fresh.state, fresh.last_shutdown) == (None, None), "registering again starts a fresh row"
