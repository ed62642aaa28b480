"""`UniqueWindows`: a job with a `unique_window` holds its key for the window, whatever its row becomes.

The store keeps, per key, the holder's id and the window's `expires_at`. A job whose key is held
by a window with ``expires_at > job.unique_window.starts_at`` is not stored: its place in the
returned list is the holder's id, even once the holder has run, been cancelled, dead-lettered,
deleted or pruned. Otherwise the job is stored and the key points to it until its own window
ends. Every time is the producer's, so the tests choose them; a window under test always ends
in the future of the real clock, because a store may drop an expired window at any time.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from hypothesis import strategies as st

from soniq.backend import (
    Backend,
    CancelJobParams,
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeleteJobParams,
    EnqueueJobsParams,
    GetJobParams,
    JobResult,
    JobStatus,
    NewJob,
    PruneJobsParams,
    QueueStatsParams,
    RetryJobParams,
    UniqueWindow,
)
from soniq_contract_tests.harness import (
    ContractHarness,
    complete_one,
    must_get,
    new_job,
    unique_queue,
    utc_now,
)
from soniq_contract_tests.suite._examples import draw
from soniq_contract_tests.suite._producer_processes import race_producers

HOUR = timedelta(hours=1)
MS = timedelta(milliseconds=1)

RACING_PRODUCERS = 4
"""Producers (OS processes where the store is shared) racing on the same keys."""
JOBS_PER_KEY_PER_PRODUCER = 4


def window_key() -> str:
    return f"window:contract.job:{uuid.uuid4().hex}"


def whole_ms(moment: datetime) -> datetime:
    """`moment` cut to the millisecond: every store keeps it exactly, so boundaries are exact."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def now_ms() -> datetime:
    return whole_ms(utc_now())


def window_job(key: str, starts_at: datetime, expires_at: datetime | None = None, **fields: object) -> NewJob:
    """A job holding `key` from `starts_at` (the producer's now) to `expires_at` (an hour on by default)."""
    window = UniqueWindow(key=key, starts_at=starts_at, expires_at=expires_at or starts_at + HOUR)
    return new_job(unique_window=window, **fields)


async def send(backend: Backend, *jobs: NewJob) -> list[str]:
    """One enqueue call: the ids it returned, which a backend with windows must return."""
    returned = await backend.enqueue_jobs(EnqueueJobsParams(jobs=list(jobs)))
    if not isinstance(returned, list) or len(returned) != len(jobs):
        raise AssertionError(
            f"enqueue_jobs of {len(jobs)} job(s) with windows returned {returned!r}; a backend with "
            "UniqueWindows must return one id per job, the holder's where a window held the key"
        )
    return returned


async def assert_held(backend: Backend, key: str, holder: str, starts_at: datetime, what: str) -> None:
    """A new job on `key` starting at `starts_at` gets `holder`'s id back and is not stored."""
    stats = await backend.queue_stats(QueueStatsParams())
    repeat = window_job(key, starts_at, args={"repeat": True})
    returned = await send(backend, repeat)
    if returned != [holder]:
        raise AssertionError(f"{what}: an enqueue inside the window returned {returned}, not the holder {holder}")
    if await backend.get_job(GetJobParams(job_id=repeat.id)) is not None:
        raise AssertionError(f"{what}: the job sent inside the window was stored")
    after = await backend.queue_stats(QueueStatsParams())
    if after.total != stats.total:
        raise AssertionError(f"{what}: the enqueue inside the window changed the row count: {stats} -> {after}")


class UniqueWindowContract:
    async def test_a_window_job_is_stored_and_a_repeat_in_the_window_returns_its_id(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            key, queue, start = window_key(), unique_queue(), now_ms()
            first = window_job(key, start, queue=queue, args={"n": 1}, producer_id="billing-api")
            assert await send(backend, first) == [first.id]
            row = await must_get(backend, first.id)
            assert (row.status, dict(row.args), row.queue, row.dedup_key, row.producer_id) == (
                JobStatus.QUEUED,
                {"n": 1},
                queue,
                None,
                "billing-api",
            )
            repeat = window_job(key, start + timedelta(minutes=10), queue=queue, args={"n": 2})
            assert await send(backend, repeat) == [first.id]
            assert await backend.get_job(GetJobParams(job_id=repeat.id)) is None
            assert (await backend.queue_stats(QueueStatsParams(queue=queue))).total == 1
            assert await must_get(backend, first.id) == row, "a repeat inside the window changed the holder"

    async def test_the_window_holds_the_key_while_the_job_runs_is_retried_and_after_it_is_done(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            key, queue, start = window_key(), unique_queue(), now_ms()
            holder = window_job(key, start, queue=queue)
            assert await send(backend, holder) == [holder.id]
            await assert_held(backend, key, holder.id, start + MS, "queued")
            claim = await backend.claim_jobs(_claim("w1", queue))
            assert [row.id for row in claim] == [holder.id]
            await assert_held(backend, key, holder.id, start + 2 * MS, "processing")
            assert await backend.retry_job(
                RetryJobParams(job_id=holder.id, worker_id="w1", error="boom", scheduled_at=utc_now())
            )
            await assert_held(backend, key, holder.id, start + 3 * MS, "queued again after a retry")
            claim = await backend.claim_jobs(_claim("w2", queue))
            assert [row.id for row in claim] == [holder.id]
            assert await complete_one(backend, job_id=holder.id, worker_id="w2", result={"ok": True})
            assert (await must_get(backend, holder.id)).status is JobStatus.DONE
            await assert_held(backend, key, holder.id, start + 30 * timedelta(minutes=1), "done")

    async def test_the_window_holds_the_key_after_a_cancel(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key, start = window_key(), now_ms()
            holder = window_job(key, start)
            assert await send(backend, holder) == [holder.id]
            assert await backend.cancel_job(CancelJobParams(job_id=holder.id))
            assert (await must_get(backend, holder.id)).status is JobStatus.CANCELLED
            await assert_held(backend, key, holder.id, start + timedelta(minutes=5), "cancelled")

    async def test_the_window_holds_the_key_after_a_dead_letter(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key, queue, start = window_key(), unique_queue(), now_ms()
            holder = window_job(key, start, queue=queue)
            assert await send(backend, holder) == [holder.id]
            assert [row.id for row in await backend.claim_jobs(_claim("w1", queue))] == [holder.id]
            assert await backend.dead_letter_job(
                DeadLetterJobParams(job_id=holder.id, worker_id="w1", error="gave up", reason="max_attempts")
            )
            assert await backend.get_job(GetJobParams(job_id=holder.id)) is None
            await assert_held(backend, key, holder.id, start + timedelta(minutes=5), "dead-lettered")

    async def test_the_window_holds_the_key_after_a_delete(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key, start = window_key(), now_ms()
            holder = window_job(key, start)
            assert await send(backend, holder) == [holder.id]
            assert await backend.delete_job(DeleteJobParams(job_id=holder.id)) is True
            await assert_held(backend, key, holder.id, start + timedelta(minutes=5), "deleted")
            assert (await backend.queue_stats(QueueStatsParams())).total == 0

    async def test_the_window_holds_the_key_after_its_row_is_pruned(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key, queue, start = window_key(), unique_queue(), now_ms()
            holder = window_job(key, start, queue=queue)
            assert await send(backend, holder) == [holder.id]
            assert [row.id for row in await backend.claim_jobs(_claim("w1", queue))] == [holder.id]
            assert await backend.complete_jobs(_expired_result("w1", holder.id)) == {holder.id}
            assert await backend.prune_jobs(PruneJobsParams(now=utc_now())) >= 1
            assert await backend.get_job(GetJobParams(job_id=holder.id)) is None
            await assert_held(backend, key, holder.id, start + timedelta(minutes=5), "pruned")

    async def test_an_expired_window_lets_a_new_job_in_and_the_key_then_points_to_it(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            key, queue, start = window_key(), unique_queue(), now_ms()
            first = window_job(key, start, start + HOUR, queue=queue)
            assert await send(backend, first) == [first.id]
            # A window ending one millisecond after the new start still holds the key ...
            await assert_held(backend, key, first.id, start + HOUR - MS, "one millisecond before expires_at")
            # ... one ending at the new start does not: the second job is stored and takes the key.
            second = window_job(key, start + HOUR, start + 2 * HOUR, queue=queue, args={"n": 2})
            assert await send(backend, second) == [second.id]
            stored = await must_get(backend, second.id)
            assert (stored.status, dict(stored.args)) == (JobStatus.QUEUED, {"n": 2})
            await assert_held(backend, key, second.id, start + HOUR + timedelta(minutes=30), "the second window")
            # The first row is still there, untouched, and no longer holds anything.
            assert (await must_get(backend, first.id)).status is JobStatus.QUEUED
            assert (await backend.queue_stats(QueueStatsParams(queue=queue))).total == 2

    async def test_a_window_that_ended_before_now_holds_nothing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key, now = window_key(), now_ms()
            old = window_job(key, now - 2 * HOUR, now - HOUR)
            assert await send(backend, old) == [old.id]
            fresh = window_job(key, now)
            assert await send(backend, fresh) == [fresh.id]
            await assert_held(backend, key, fresh.id, now + MS, "the window that replaced an expired one")
            assert (await backend.queue_stats(QueueStatsParams())).total == 2

    async def test_windows_of_different_keys_are_independent(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key_a, key_b, start = window_key(), window_key(), now_ms()
            a = window_job(key_a, start, start + HOUR)
            b = window_job(key_b, start + MS, start + 3 * HOUR)
            assert await send(backend, a) == [a.id]
            assert await send(backend, b) == [b.id], "a window on another key held this one"
            await assert_held(backend, key_a, a.id, start + timedelta(minutes=1), "key a")
            await assert_held(backend, key_b, b.id, start + timedelta(minutes=1), "key b")
            # Key a's window ends and a new job takes it; key b still belongs to b.
            a2 = window_job(key_a, start + HOUR, start + 2 * HOUR)
            assert await send(backend, a2) == [a2.id]
            await assert_held(backend, key_b, b.id, start + HOUR + MS, "key b after key a moved on")
            await assert_held(backend, key_a, a2.id, start + HOUR + MS, "key a's new window")
            # A key that differs only in case, or by a suffix, is another key.
            for other in (key_a.upper(), key_a + " ", key_a + "x"):
                job = window_job(other, start + MS)
                assert await send(backend, job) == [job.id], f"key {other!r} was held by {key_a!r}"

    async def test_a_window_job_in_one_call_with_plain_keyed_and_held_jobs(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            held_key, new_key, dedup_key, queue, start = (
                window_key(),
                window_key(),
                f"contract-key-{uuid.uuid4().hex[:12]}",
                unique_queue(),
                now_ms(),
            )
            holder = window_job(held_key, start, queue=queue)
            assert await send(backend, holder) == [holder.id]
            batch = [
                new_job(queue=queue),
                window_job(new_key, start + MS, queue=queue),
                window_job(held_key, start + MS, queue=queue),
                new_job(queue=queue, dedup_key=dedup_key),
                new_job(queue=queue),
            ]
            returned = await send(backend, *batch)
            assert returned == [batch[0].id, batch[1].id, holder.id, batch[3].id, batch[4].id]
            assert (await backend.queue_stats(QueueStatsParams(queue=queue))).total == 5
            assert await backend.get_job(GetJobParams(job_id=batch[2].id)) is None
            for job in (batch[0], batch[1], batch[3], batch[4]):
                assert (await must_get(backend, job.id)).status is JobStatus.QUEUED
            # The window stored in the batch holds its key like any other.
            await assert_held(backend, new_key, batch[1].id, start + timedelta(minutes=1), "the batch's window")

    async def test_drawn_sequences_of_windows_hold_as_the_rule_says(self, contract: ContractHarness) -> None:
        # (key 0 or 1, start in ms after a base a minute from now, window length in ms)
        attempts = st.tuples(
            st.integers(min_value=0, max_value=1),
            st.integers(min_value=0, max_value=20_000),
            st.integers(min_value=1, max_value=8_000),
        )
        fixed = [
            [(0, 0, 1000), (0, 999, 10), (0, 1000, 10), (0, 1005, 10), (0, 1010, 1)],
            [(0, 5000, 100), (0, 0, 100), (1, 5050, 100), (0, 5099, 1), (0, 5100, 1)],
        ]
        sequences = draw(st.lists(attempts, min_size=1, max_size=8), fixed)
        async with contract.backend() as backend:
            base = now_ms() + timedelta(minutes=1)
            for sequence in sequences:
                keys = [window_key(), window_key()]
                held: dict[int, tuple[str, datetime]] = {}
                stored: set[str] = set()
                for step, (which, offset, length) in enumerate(sequence):
                    starts_at = base + offset * MS
                    job = window_job(keys[which], starts_at, starts_at + length * MS, args={"step": step})
                    holder = held.get(which)
                    if holder is not None and holder[1] > starts_at:
                        expected = holder[0]
                    else:
                        expected = job.id
                        held[which] = (job.id, starts_at + length * MS)
                        stored.add(job.id)
                    returned = await send(backend, job)
                    assert returned == [expected], (
                        f"sequence {sequence}, step {step}: returned {returned}, expected "
                        f"{'the new job' if expected == job.id else 'the holder'} {expected}"
                    )
                for job_id in stored:
                    await must_get(backend, job_id)

    async def test_producers_in_several_processes_racing_on_windows_store_one_row_per_key(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            start = now_ms()
            keys = {window_key(): unique_queue("race") for _ in range(2)}
            per_producer = [
                [
                    window_job(key, start + (producer * 10 + n) * MS, args={"producer": producer, "n": n}, queue=queue)
                    for n in range(JOBS_PER_KEY_PER_PRODUCER)
                    for key, queue in keys.items()
                ]
                for producer in range(RACING_PRODUCERS)
            ]
            returned = await race_producers(contract.factory, contract.namespace_of(backend), backend, per_producer)
            sent = [job for jobs in per_producer for job in jobs]
            got = {
                job.id: job_id
                for jobs, ids in zip(per_producer, returned, strict=True)
                for job, job_id in zip(jobs, ids, strict=True)
            }
            for key, queue in keys.items():
                stats = await backend.queue_stats(QueueStatsParams(queue=queue))
                assert stats.total == 1, f"{stats.total} rows stored for one window on key {key}"
                winners = {got[job.id] for job in sent if job.unique_window and job.unique_window.key == key}
                assert len(winners) == 1, f"the producers on key {key} got different ids back: {winners}"
                (winner,) = winners
                assert winner in {job.id for job in sent if job.queue == queue}
                assert (await must_get(backend, winner)).queue == queue
                await assert_held(backend, key, winner, start + timedelta(minutes=1), f"key {key} after the race")


def _claim(worker_id: str, queue: str) -> ClaimJobsParams:
    return ClaimJobsParams(worker_id=worker_id, queues=[queue], limit=1, mark_started=True)


def _expired_result(worker_id: str, job_id: str) -> CompleteJobsParams:
    """Completion of `job_id` with an `expires_at` already past, so that a prune deletes the row."""
    return CompleteJobsParams(
        worker_id=worker_id,
        results=[JobResult(job_id=job_id, result=None, expires_at=utc_now() - timedelta(seconds=5))],
    )
