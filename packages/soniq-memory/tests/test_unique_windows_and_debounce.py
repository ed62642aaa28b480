"""Unique windows (`UniqueWindows`) and debounced jobs (`DebouncedJobs`) in the memory store: what
the store keeps per key, what a repeat enqueue does, and producers racing on one key."""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from soniq.params import (
    CancelJobParams,
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeleteJobParams,
    EnqueueJobsParams,
    JobResult,
    PruneJobsParams,
)
from soniq.records import JobStatus, NewJob, UniqueWindow
from soniq_memory import MemoryBackend

pytestmark = pytest.mark.asyncio


def _job(**fields: object) -> NewJob:
    values: dict[str, object] = {
        "id": str(uuid.uuid4()),
        "job_name": "example",
        "args": {},
        "queue": "default",
        "priority": 100,
        "scheduled_at": datetime.now(UTC) - timedelta(seconds=1),
        "max_attempts": 3,
    }
    values.update(fields)
    return NewJob(**values)  # type: ignore[arg-type]


def _window(key: str, starts_at: datetime, seconds: float = 60.0) -> UniqueWindow:
    return UniqueWindow(key=key, starts_at=starts_at, expires_at=starts_at + timedelta(seconds=seconds))


def _claim(worker_id: str = "w") -> ClaimJobsParams:
    return ClaimJobsParams(worker_id=worker_id, queues=None, limit=10, mark_started=True)


async def _enqueue(backend: MemoryBackend, *jobs: NewJob) -> list[str]:
    stored = await backend.enqueue_jobs(EnqueueJobsParams(jobs=list(jobs)))
    assert stored is not None
    return stored


# -- unique windows ---------------------------------------------------------------


async def test_a_window_returns_its_holder_whatever_became_of_the_row() -> None:
    backend = MemoryBackend()
    now = datetime.now(UTC)
    first = _job(unique_window=_window("k", now))
    assert await _enqueue(backend, first) == [first.id]

    def repeat() -> NewJob:
        return _job(unique_window=_window("k", datetime.now(UTC)))

    assert await _enqueue(backend, repeat()) == [first.id], "held while queued"
    (claimed,) = await backend.claim_jobs(_claim())
    assert await _enqueue(backend, repeat()) == [first.id], "a claim does not release a window"
    await backend.complete_jobs(CompleteJobsParams(worker_id="w", results=[JobResult(job_id=claimed.id, result=None)]))
    assert await _enqueue(backend, repeat()) == [first.id], "nor does a completion"
    assert await backend.delete_job(DeleteJobParams(job_id=first.id))
    assert await _enqueue(backend, repeat()) == [first.id], "nor a delete: the id of a row that is gone"
    assert list(backend.jobs) == [], "no repeat was stored"


async def test_a_cancelled_or_dead_lettered_holder_keeps_its_window() -> None:
    backend = MemoryBackend()
    now = datetime.now(UTC)
    cancelled, dead = _job(unique_window=_window("c", now)), _job(unique_window=_window("d", now))
    await _enqueue(backend, cancelled)
    assert await backend.cancel_job(CancelJobParams(job_id=cancelled.id))
    await _enqueue(backend, dead)
    (row,) = await backend.claim_jobs(_claim())
    assert await backend.dead_letter_job(DeadLetterJobParams(job_id=row.id, worker_id="w", error="x", reason="failed"))
    later = datetime.now(UTC)
    assert await _enqueue(
        backend, _job(unique_window=_window("c", later)), _job(unique_window=_window("d", later))
    ) == [
        cancelled.id,
        dead.id,
    ]
    assert set(backend.jobs) == {cancelled.id}


async def test_a_window_ends_at_its_expiry_and_the_next_job_takes_the_key() -> None:
    backend = MemoryBackend()
    start = datetime.now(UTC) - timedelta(minutes=10)
    first = _job(unique_window=_window("k", start, 60))
    await _enqueue(backend, first)
    just_inside = _job(unique_window=_window("k", start + timedelta(seconds=60) - timedelta(microseconds=1)))
    assert await _enqueue(backend, just_inside) == [first.id]
    second = _job(unique_window=_window("k", start + timedelta(seconds=60), 60))
    assert await _enqueue(backend, second) == [second.id], "a window ending at the new start no longer holds"
    assert await _enqueue(backend, _job(unique_window=_window("k", start + timedelta(seconds=61)))) == [second.id]
    assert set(backend.jobs) == {first.id, second.id}


async def test_different_keys_and_plain_jobs_do_not_meet_and_a_batch_mixes_them() -> None:
    backend = MemoryBackend()
    now = datetime.now(UTC)
    dep = _job()
    a, b = _job(unique_window=_window("a", now)), _job(unique_window=_window("b", now))
    child = _job(depends_on=(dep.id,))
    assert await _enqueue(backend, dep, a, b, child) == [dep.id, a.id, b.id, child.id]
    assert backend.jobs[child.id].waiting_on == 1
    plain = _job()
    assert await _enqueue(backend, _job(unique_window=_window("a", now)), plain) == [a.id, plain.id]
    assert len(backend.jobs) == 5


async def test_prune_drops_only_ended_windows_bounded_by_its_limit() -> None:
    backend = MemoryBackend()
    past = datetime.now(UTC) - timedelta(hours=1)
    ended = [_job(unique_window=_window(f"old-{n}", past, 1)) for n in range(3)]
    live = _job(unique_window=_window("live", datetime.now(UTC), 3600))
    await _enqueue(backend, *ended, live)
    store = backend._store
    assert await backend.prune_jobs(PruneJobsParams(limit=2)) == 0, "windows are not counted as pruned jobs"
    assert len(store.unique_windows) == 2
    # A `now` far ahead prunes rows, not windows that still hold by the store's clock.
    await backend.prune_jobs(PruneJobsParams(now=datetime.now(UTC) + timedelta(days=1), limit=10))
    assert set(store.unique_windows) == {"live"}
    assert await _enqueue(backend, _job(unique_window=_window("live", datetime.now(UTC)))) == [live.id]


# -- debounced jobs ----------------------------------------------------------------


async def test_a_repeat_moves_the_queued_row_and_keeps_its_id_deadline_and_created_at() -> None:
    backend = MemoryBackend()
    now = datetime.now(UTC)
    deadline = now + timedelta(seconds=30)
    first = _job(dedup_key="d", args={"n": 1}, scheduled_at=now + timedelta(seconds=5), debounce_deadline=deadline)
    await _enqueue(backend, first)
    before = backend.jobs[first.id]
    repeat = _job(dedup_key="d", args={"n": 2}, scheduled_at=now + timedelta(seconds=10), debounce_deadline=deadline)
    assert await _enqueue(backend, repeat) == [first.id]
    row = backend.jobs[first.id]
    assert (row.args, row.scheduled_at) == ({"n": 2}, now + timedelta(seconds=10))
    assert row.created_at == before.created_at
    assert row.updated_at >= before.updated_at
    # A later producer's deadline is later, but the row keeps its own: the start stops there.
    late = _job(
        dedup_key="d",
        args={"n": 3},
        scheduled_at=now + timedelta(minutes=5),
        debounce_deadline=now + timedelta(hours=1),
    )
    assert await _enqueue(backend, late) == [first.id]
    row = backend.jobs[first.id]
    assert (row.args, row.scheduled_at) == ({"n": 3}, deadline)
    assert backend._store.debounce_deadlines == {first.id: deadline}
    assert list(backend.jobs) == [first.id]


async def test_the_claim_honours_a_moved_start() -> None:
    backend = MemoryBackend()
    now = datetime.now(UTC)
    deadline = now + timedelta(hours=1)
    first = _job(dedup_key="d", scheduled_at=now - timedelta(seconds=1), debounce_deadline=deadline)
    await _enqueue(backend, first)
    pushed = _job(dedup_key="d", scheduled_at=now + timedelta(minutes=10), debounce_deadline=deadline)
    assert await _enqueue(backend, pushed) == [first.id]
    assert await backend.claim_jobs(_claim()) == [], "pushed past now: not due any more"
    pulled = _job(dedup_key="d", scheduled_at=now - timedelta(seconds=1), debounce_deadline=deadline)
    assert await _enqueue(backend, pulled) == [first.id]
    assert [row.id for row in await backend.claim_jobs(_claim())] == [first.id]


async def test_a_holder_that_was_not_debounced_is_left_as_it_is_and_so_is_a_plain_repeat() -> None:
    backend = MemoryBackend()
    now = datetime.now(UTC)
    plain = _job(dedup_key="p", args={"n": 1})
    await _enqueue(backend, plain)
    debounced = _job(dedup_key="p", args={"n": 2}, scheduled_at=now, debounce_deadline=now + timedelta(seconds=5))
    assert await _enqueue(backend, debounced) == [plain.id]
    assert backend.jobs[plain.id].args == {"n": 1}
    assert plain.id not in backend._store.debounce_deadlines

    holder = _job(dedup_key="q", args={"n": 1}, scheduled_at=now, debounce_deadline=now + timedelta(seconds=5))
    await _enqueue(backend, holder)
    assert await _enqueue(backend, _job(dedup_key="q", args={"n": 2})) == [holder.id]
    assert (backend.jobs[holder.id].args, backend.jobs[holder.id].scheduled_at) == ({"n": 1}, now)


async def test_a_claim_releases_the_key_and_the_next_enqueue_is_a_new_row() -> None:
    backend = MemoryBackend()
    now = datetime.now(UTC)
    first = _job(dedup_key="d", scheduled_at=now - timedelta(seconds=1), debounce_deadline=now + timedelta(seconds=9))
    await _enqueue(backend, first)
    (claimed,) = await backend.claim_jobs(_claim())
    second = _job(dedup_key="d", args={"n": 2}, scheduled_at=now, debounce_deadline=now + timedelta(seconds=9))
    assert await _enqueue(backend, second) == [second.id]
    assert backend.jobs[claimed.id].args == {}, "the running row keeps its args"
    await backend.complete_jobs(
        CompleteJobsParams(worker_id="w", results=[JobResult(claimed.id, None, delete_row=True)])
    )
    assert set(backend._store.debounce_deadlines) == {second.id}, "a deleted row's deadline goes with it"


async def test_a_repeat_whose_args_are_not_json_changes_nothing() -> None:
    backend = MemoryBackend()
    now = datetime.now(UTC)
    first = _job(dedup_key="d", args={"n": 1}, scheduled_at=now, debounce_deadline=now + timedelta(seconds=9))
    await _enqueue(backend, first)
    bad = _job(dedup_key="d", args={"n": object()}, scheduled_at=now, debounce_deadline=now + timedelta(seconds=9))
    with pytest.raises(TypeError):
        await _enqueue(backend, _job(), bad)
    assert list(backend.jobs) == [first.id]
    assert backend.jobs[first.id].args == {"n": 1}


# -- producers racing on one key ----------------------------------------------------


async def test_racing_tasks_on_one_named_store_store_one_row_per_window_and_per_debounce() -> None:
    name = f"race-{uuid.uuid4().hex[:6]}"
    producers = [MemoryBackend.from_url(f"memory://{name}") for _ in range(8)]
    now = datetime.now(UTC)
    deadline = now + timedelta(minutes=1)

    async def produce(n: int, backend: MemoryBackend) -> tuple[str, str]:
        await asyncio.sleep(0)  # every task is started before any enqueues
        window = _job(unique_window=_window("w", datetime.now(UTC)), args={"producer": n})
        debounced = _job(dedup_key="d", args={"producer": n}, scheduled_at=now, debounce_deadline=deadline)
        (window_id,) = await _enqueue(backend, window)
        (debounced_id,) = await _enqueue(backend, debounced)
        return window_id, debounced_id

    results = await asyncio.gather(*(produce(n, backend) for n in range(5) for backend in producers))
    rows = producers[0].jobs
    assert len(rows) == 2, "one row per window and one per debounce key"
    assert len({window_id for window_id, _ in results}) == 1
    assert len({debounced_id for _, debounced_id in results}) == 1
    queued = rows[results[0][1]]
    assert queued.status is JobStatus.QUEUED
    assert queued.args in [{"producer": n} for n in range(5)]


async def test_racing_threads_on_one_named_store_store_one_row_per_key() -> None:
    name = f"threads-{uuid.uuid4().hex[:6]}"
    start = threading.Barrier(6)
    deadline = datetime.now(UTC) + timedelta(minutes=1)
    results: list[tuple[str, str]] = []

    def produce(n: int) -> None:
        backend = MemoryBackend.from_url(f"memory://{name}")

        async def body() -> tuple[str, str]:
            window = _job(unique_window=_window("w", datetime.now(UTC)))
            debounced = _job(
                dedup_key="d", args={"thread": n}, scheduled_at=datetime.now(UTC), debounce_deadline=deadline
            )
            (window_id,) = await _enqueue(backend, window)
            (debounced_id,) = await _enqueue(backend, debounced)
            return window_id, debounced_id

        start.wait(10)
        results.append(asyncio.run(body()))

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        await asyncio.to_thread(thread.join, 10)
    assert len(results) == 6
    rows = MemoryBackend.from_url(f"memory://{name}").jobs
    assert len(rows) == 2
    assert len(set(results)) == 1
    assert rows[results[0][1]].args in [{"thread": n} for n in range(6)]
