"""`DebouncedJobs`: a repeat enqueue moves the queued job instead of adding one.

A debounced job carries a `dedup_key` and a `debounce_deadline` (its producer's first enqueue
plus the longest wait), and its `scheduled_at` is never after that deadline. With no `queued`
row on the key it is stored as any keyed job, its deadline with it. A repeat while a row stored
debounced holds the key stores nothing: in the same atomic step the holder takes the repeat's
`args` and ``scheduled_at = min(repeat's scheduled_at, holder's deadline)``, `updated_at` now,
and keeps its id, its deadline, its `created_at` and everything else; the repeat gets the
holder's id. A holder stored without a deadline (a plain `dedup_key`) is left as it is. A claim
releases the key, so a repeat while the job runs starts a new queued row.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from soniq.backend import (
    Backend,
    CancelJobParams,
    ClaimJobsParams,
    EnqueueJobsParams,
    GetJobParams,
    JobRecord,
    JobStatus,
    NewJob,
    QueueStatsParams,
)
from soniq_contract_tests.harness import (
    ContractHarness,
    assert_between,
    assert_same_time,
    fields_except,
    must_get,
    new_job,
    unique_queue,
    utc_now,
)
from soniq_contract_tests.suite._examples import draw, json_values, storable_text
from soniq_contract_tests.suite._producer_processes import race_producers

SECOND = timedelta(seconds=1)
MS = timedelta(milliseconds=1)
MOVED = ("args", "scheduled_at", "updated_at")
"""The only fields a repeat writes on the holder."""

RACING_PRODUCERS = 4
"""Producers (OS processes where the store is shared) debouncing the same key."""
REPEATS_PER_PRODUCER = 6


def debounce_key() -> str:
    return f"debounce:contract.job:{uuid.uuid4().hex}"


def whole_ms(moment: datetime) -> datetime:
    """`moment` cut to the millisecond: every store keeps it exactly."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def later(seconds: float = 60) -> datetime:
    """A whole-millisecond time `seconds` from now: a start no claim reaches during the test."""
    return whole_ms(utc_now() + timedelta(seconds=seconds))


def args_text(args: Mapping[str, Any]) -> str:
    """The arguments as core hands them over besides the dict: compact JSON text."""
    return json.dumps(dict(args), separators=(",", ":"), ensure_ascii=False)


def debounced(key: str, args: Mapping[str, Any], scheduled_at: datetime, deadline: datetime, **fields: Any) -> NewJob:
    """A debounced job as core builds it: the key as `dedup_key`, its start and its deadline."""
    if scheduled_at > deadline:
        raise ValueError(f"a debounced job starts at its deadline at the latest: {scheduled_at} > {deadline}")
    return new_job(
        dedup_key=key,
        args=dict(args),
        args_json=args_text(args),
        scheduled_at=scheduled_at,
        debounce_deadline=deadline,
        **fields,
    )


async def send(backend: Backend, *jobs: NewJob) -> list[str]:
    """One enqueue call: the ids it returned, which a backend that deduplicates must return."""
    returned = await backend.enqueue_jobs(EnqueueJobsParams(jobs=list(jobs)))
    if not isinstance(returned, list) or len(returned) != len(jobs):
        raise AssertionError(
            f"enqueue_jobs of {len(jobs)} debounced or keyed job(s) returned {returned!r}; a backend that "
            "deduplicates must return one id per job, the holder's where a row held the key"
        )
    return returned


def assert_moved(backend: Backend, row: JobRecord, args: Mapping[str, Any], scheduled_at: datetime, what: str) -> None:
    """`row` holds `args` and starts at `scheduled_at`."""
    if dict(row.args) != dict(args):
        raise AssertionError(f"{what}: the row's args are {dict(row.args)!r}, expected {dict(args)!r}")
    assert_same_time(row.scheduled_at, scheduled_at, backend.capabilities.timestamp_precision, f"{what}: scheduled_at")


def _claim(worker_id: str, queue: str, limit: int = 1) -> ClaimJobsParams:
    return ClaimJobsParams(worker_id=worker_id, queues=[queue], limit=limit, mark_started=True)


def json_objects() -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(storable_text(max_size=10), json_values(), max_size=4)


class DebouncedJobContract:
    async def test_a_first_debounced_enqueue_is_stored_as_a_keyed_job(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key, queue = debounce_key(), unique_queue()
            start = later()
            job = debounced(key, {"n": 1}, start, start + timedelta(minutes=5), queue=queue)
            assert await send(backend, job) == [job.id]
            row = await must_get(backend, job.id)
            assert (row.status, row.dedup_key, row.queue) == (JobStatus.QUEUED, key, queue)
            assert_moved(backend, row, {"n": 1}, start, "the first enqueue")
            assert await backend.claim_jobs(_claim("w1", queue)) == [], "a row debounced into the future was claimed"

    async def test_a_repeat_replaces_the_args_and_moves_the_start_and_changes_nothing_else(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            key, queue = debounce_key(), unique_queue()
            start = later()
            deadline = start + timedelta(minutes=10)
            first = debounced(
                key, {"n": 1}, start, deadline, queue=queue, priority=10, max_attempts=3, producer_id="api"
            )
            assert await send(backend, first) == [first.id]
            before = await must_get(backend, first.id)
            new_args = {"n": 2, "text": "ünï ✓", "nested": {"list": [1, None, True]}}
            repeat = debounced(
                key,
                new_args,
                start + timedelta(seconds=30),
                start + timedelta(minutes=20),
                queue=queue,
                priority=50,
                max_attempts=9,
                producer_id="other-api",
            )
            called = utc_now()
            assert await send(backend, repeat) == [first.id]
            returned = utc_now()
            assert await backend.get_job(GetJobParams(job_id=repeat.id)) is None
            assert (await backend.queue_stats(QueueStatsParams(queue=queue))).total == 1
            after = await must_get(backend, first.id)
            assert_moved(backend, after, new_args, start + timedelta(seconds=30), "after a repeat")
            assert_between(after.updated_at, called, returned, contract.slack(backend), "updated_at after a repeat")
            assert fields_except(after, *MOVED) == fields_except(before, *MOVED), (
                "a repeat changed more than args, scheduled_at and updated_at (the holder keeps its priority, "
                "attempts budget, producer, created_at and everything else)"
            )

    async def test_a_repeat_never_moves_the_start_past_the_first_deadline(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key, queue = debounce_key(), unique_queue()
            base = later()
            deadline = base + timedelta(seconds=10)
            first = debounced(key, {"n": 0}, base, deadline, queue=queue)
            assert await send(backend, first) == [first.id]
            # (start, the repeat's own deadline, where the row must then start)
            steps = [
                (base + 5 * SECOND, base + 15 * SECOND, base + 5 * SECOND),
                (base + 20 * SECOND, base + 30 * SECOND, deadline),  # past the first deadline: capped
                (base + 2 * SECOND, base + 3 * SECOND, base + 2 * SECOND),  # earlier again
                (deadline, deadline, deadline),
                (deadline + MS, deadline + MS, deadline),
                (base + timedelta(hours=1), base + timedelta(hours=2), deadline),
            ]
            for n, (start, own_deadline, expected) in enumerate(steps, start=1):
                repeat = debounced(key, {"n": n}, start, own_deadline, queue=queue)
                assert await send(backend, repeat) == [first.id], f"repeat {n}"
                assert_moved(backend, await must_get(backend, first.id), {"n": n}, expected, f"repeat {n}")
            assert (await backend.queue_stats(QueueStatsParams(queue=queue))).total == 1

    async def test_a_plain_keyed_holder_is_left_as_it_is(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key, queue = debounce_key(), unique_queue()
            plain = new_job(queue=queue, dedup_key=key, args={"plain": True}, scheduled_at=later())
            assert await send(backend, plain) == [plain.id]
            before = await must_get(backend, plain.id)
            start = later(30)
            repeat = debounced(key, {"debounced": True}, start, start + timedelta(minutes=1), queue=queue)
            assert await send(backend, repeat) == [plain.id]
            assert await must_get(backend, plain.id) == before, "a debounced enqueue changed a plain keyed holder"
            assert await backend.get_job(GetJobParams(job_id=repeat.id)) is None
            assert (await backend.queue_stats(QueueStatsParams(queue=queue))).total == 1

    async def test_after_the_holder_is_claimed_an_enqueue_starts_a_new_row(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key, queue = debounce_key(), unique_queue()
            due = whole_ms(utc_now() - SECOND)
            first = debounced(key, {"n": 1}, due, due + timedelta(minutes=1), queue=queue)
            assert await send(backend, first) == [first.id]
            assert [row.id for row in await backend.claim_jobs(_claim("w1", queue))] == [first.id]
            running = await must_get(backend, first.id)
            start = later()
            second_deadline = start + timedelta(minutes=1)
            second = debounced(key, {"n": 2}, start, second_deadline, queue=queue)
            assert await send(backend, second) == [second.id], "a claimed row still held the debounce key"
            new_row = await must_get(backend, second.id)
            assert (new_row.status, new_row.dedup_key) == (JobStatus.QUEUED, key)
            assert_moved(backend, new_row, {"n": 2}, start, "the new row")
            # A repeat now moves the new row, capped by the new row's own deadline.
            third = debounced(key, {"n": 3}, start + timedelta(hours=1), start + timedelta(hours=1), queue=queue)
            assert await send(backend, third) == [second.id]
            assert_moved(backend, await must_get(backend, second.id), {"n": 3}, second_deadline, "the new row")
            assert await must_get(backend, first.id) == running, "a repeat changed the row being run"
            assert (await backend.queue_stats(QueueStatsParams(queue=queue))).total == 2

    async def test_a_cancelled_holder_releases_the_key(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            key, queue = debounce_key(), unique_queue()
            start = later()
            first = debounced(key, {"n": 1}, start, start + timedelta(minutes=1), queue=queue)
            assert await send(backend, first) == [first.id]
            assert await backend.cancel_job(CancelJobParams(job_id=first.id))
            cancelled = await must_get(backend, first.id)
            second = debounced(key, {"n": 2}, start, start + timedelta(minutes=1), queue=queue)
            assert await send(backend, second) == [second.id]
            assert await must_get(backend, first.id) == cancelled
            assert (await must_get(backend, second.id)).status is JobStatus.QUEUED

    async def test_once_the_deadline_has_passed_repeats_leave_the_job_due_at_it(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            key, queue = debounce_key(), unique_queue()
            deadline = whole_ms(utc_now() - SECOND)
            first = debounced(key, {"n": 0}, deadline, deadline, queue=queue)
            assert await send(backend, first) == [first.id]
            for n in range(1, 4):
                start = later(60 * n)
                repeat = debounced(key, {"n": n}, start, start + timedelta(hours=1), queue=queue)
                assert await send(backend, repeat) == [first.id]
                assert_moved(backend, await must_get(backend, first.id), {"n": n}, deadline, f"repeat {n}")
            claimed = await backend.claim_jobs(_claim("w1", queue))
            assert [row.id for row in claimed] == [first.id], "the row at its passed deadline was not claimed"
            assert dict(claimed[0].args) == {"n": 3}, "the claim did not return the last repeat's args"

    async def test_the_claim_follows_a_moved_start(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            # Moved earlier: a row debounced into the future becomes due.
            key, queue = debounce_key(), unique_queue()
            start = later(3600)
            first = debounced(key, {"n": 1}, start, start + timedelta(hours=1), queue=queue)
            assert await send(backend, first) == [first.id]
            assert await backend.claim_jobs(_claim("w1", queue)) == []
            due = whole_ms(utc_now() - SECOND)
            assert await send(backend, debounced(key, {"n": 2}, due, due, queue=queue)) == [first.id]
            claimed = await backend.claim_jobs(_claim("w1", queue))
            assert [row.id for row in claimed] == [first.id], "a row moved to a start in the past was not claimed"
            assert dict(claimed[0].args) == {"n": 2}
            # Moved later: a due row is no longer claimed.
            key, queue = debounce_key(), unique_queue()
            due = whole_ms(utc_now() - SECOND)
            first = debounced(key, {"n": 1}, due, due + timedelta(hours=2), queue=queue)
            assert await send(backend, first) == [first.id]
            start = later(3600)
            assert await send(backend, debounced(key, {"n": 2}, start, start, queue=queue)) == [first.id]
            assert await backend.claim_jobs(_claim("w1", queue)) == [], "a row moved an hour on was claimed"
            row = await must_get(backend, first.id)
            assert row.status is JobStatus.QUEUED
            assert_moved(backend, row, {"n": 2}, start, "the row moved later")

    async def test_a_debounced_repeat_in_one_call_with_other_jobs(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            held_key, new_key, plain_key, queue = debounce_key(), debounce_key(), debounce_key(), unique_queue()
            start = later()
            holder = debounced(held_key, {"n": 0}, start, start + timedelta(minutes=1), queue=queue)
            assert await send(backend, holder) == [holder.id]
            new_deadline = start + timedelta(minutes=2)
            batch = [
                new_job(queue=queue),
                debounced(held_key, {"n": 1}, start + SECOND, start + timedelta(minutes=5), queue=queue),
                debounced(new_key, {"m": 1}, start, new_deadline, queue=queue),
                new_job(queue=queue, dedup_key=plain_key),
                new_job(queue=queue),
            ]
            returned = await send(backend, *batch)
            assert returned == [batch[0].id, holder.id, batch[2].id, batch[3].id, batch[4].id]
            assert (await backend.queue_stats(QueueStatsParams(queue=queue))).total == 5
            assert await backend.get_job(GetJobParams(job_id=batch[1].id)) is None
            assert_moved(backend, await must_get(backend, holder.id), {"n": 1}, start + SECOND, "the batch's repeat")
            # The debounced job the batch stored kept its deadline: a repeat far out is capped by it.
            far = start + timedelta(hours=1)
            assert await send(backend, debounced(new_key, {"m": 2}, far, far, queue=queue)) == [batch[2].id]
            assert_moved(backend, await must_get(backend, batch[2].id), {"m": 2}, new_deadline, "the batch's new job")

    async def test_drawn_repeats_start_at_the_last_start_capped_by_the_first_deadline(
        self, contract: ContractHarness
    ) -> None:
        # (start in ms after a base a minute from now, the job's own deadline in ms after its start, args)
        enqueues: st.SearchStrategy[tuple[int, int, dict[str, Any]]] = st.tuples(
            st.integers(min_value=0, max_value=60_000),
            st.integers(min_value=0, max_value=60_000),
            json_objects(),
        )
        fixed: list[list[tuple[int, int, dict[str, Any]]]] = [
            [(0, 0, {})],
            [(1000, 5000, {"a": 1}), (2000, 0, {"a": 2}), (9000, 100, {"a": 3}), (5999, 1, {"a": 4})],
            [(60_000, 0, {"late": True}), (0, 0, {"early": True}), (60_000, 60_000, {})],
        ]
        sequences = draw(st.lists(enqueues, min_size=1, max_size=8), fixed)
        async with contract.backend() as backend:
            base = later()
            for sequence in sequences:
                key, queue = debounce_key(), unique_queue()
                first_id: str | None = None
                first_deadline = base
                for step, (offset, wait, args) in enumerate(sequence):
                    start = base + offset * MS
                    job = debounced(key, args, start, start + wait * MS, queue=queue)
                    returned = await send(backend, job)
                    if first_id is None:
                        first_id, first_deadline = job.id, start + wait * MS
                    what = f"sequence {sequence}, step {step}"
                    assert returned == [first_id], f"{what}: returned {returned}, expected the holder {first_id}"
                    row = await must_get(backend, first_id)
                    assert row.status is JobStatus.QUEUED, what
                    assert_moved(backend, row, args, min(start, first_deadline), what)
                stats = await backend.queue_stats(QueueStatsParams(queue=queue))
                assert stats.total == 1, f"sequence {sequence}: {stats.total} rows stored"

    async def test_producers_in_several_processes_debouncing_one_key_leave_one_queued_row(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            key, queue = debounce_key(), unique_queue("race")
            base = later()

            def racer(producer: int, n: int) -> NewJob:
                # Starts spread over 50 s, each producer's in another order; deadlines 0, 10 or 20 s on.
                start = base + ((producer * 7 + n * 13) % 50) * SECOND
                deadline = start + ((producer + n) % 3) * 10 * SECOND
                return debounced(key, {"producer": producer, "n": n}, start, deadline, queue=queue)

            per_producer = [
                [racer(producer, n) for n in range(REPEATS_PER_PRODUCER)] for producer in range(RACING_PRODUCERS)
            ]
            returned = await race_producers(contract.factory, contract.namespace_of(backend), backend, per_producer)
            sent = {job.id: job for jobs in per_producer for job in jobs}
            stats = await backend.queue_stats(QueueStatsParams(queue=queue))
            assert (stats.total, stats.queued) == (1, 1), f"racing debounced enqueues on one key left {stats}"
            ids = {job_id for got in returned for job_id in got}
            assert len(ids) == 1, f"the producers got different ids back: {ids}"
            (winner_id,) = ids
            assert winner_id in sent, "the stored row is none of the jobs sent"
            winner = sent[winner_id]
            assert winner.debounce_deadline is not None
            row = await must_get(backend, winner_id)
            # The row is one enqueue's arguments with that enqueue's start, capped by the winner's deadline.
            matching = [job for job in sent.values() if dict(job.args) == dict(row.args)]
            assert len(matching) == 1, f"the row's args {dict(row.args)!r} are none of the enqueues'"
            (last,) = matching
            assert_moved(backend, row, last.args, min(last.scheduled_at, winner.debounce_deadline), "after the race")
            assert row.scheduled_at <= winner.debounce_deadline
