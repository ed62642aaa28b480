"""Unique windows (`UniqueWindows`) and debounced jobs (`DebouncedJobs`) on one Redis and on a
Redis Cluster: what enqueue.lua stores, what releases (and what does not release) a window, how a
debounced row moves and where the claim finds it, and producer processes racing on one key."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis
from redis.crc import key_slot

from soniq.params import (
    CancelJobParams,
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeleteJobParams,
    EnqueueJobsParams,
    GetJobParams,
    GroupLimit,
    JobPageParams,
    JobResult,
    LimitScope,
)
from soniq.records import JobRecord, JobStatus, NewJob, UniqueWindow
from soniq_redis import RedisBackend
from soniq_redis.connection import DuplicateJobError
from soniq_redis.rows import to_micros

REDIS_URL = os.environ.get("SONIQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
CLUSTER_URL = os.environ.get("SONIQ_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000")

pytestmark = pytest.mark.asyncio

HOUR = timedelta(hours=1)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true, so this fails instead of skipping)")
    pytest.skip(reason)


@pytest_asyncio.fixture(params=["single", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RedisBackend]:
    """A connected backend in a fresh namespace, on the single server and on the cluster."""
    url = REDIS_URL if request.param == "single" else CLUSTER_URL
    backend = RedisBackend.from_url(url, namespace=f"wd_{uuid.uuid4().hex[:10]}")
    try:
        await backend.connect()
    except Exception as exc:
        _unavailable(f"no Redis at {url} ({exc})")
    try:
        yield backend
    finally:
        await backend.drop_schema()
        await backend.close()


def _job(**fields: Any) -> NewJob:
    fields.setdefault("scheduled_at", datetime.now(UTC) - timedelta(seconds=1))
    fields.setdefault("args", {"n": 1})
    return NewJob(
        id=str(uuid.uuid4()),
        job_name=fields.pop("job_name", "tests.job"),
        queue="default",
        priority=100,
        max_attempts=3,
        **fields,
    )


def _window(key: str, starts_at: datetime, length: timedelta = HOUR) -> UniqueWindow:
    return UniqueWindow(key=key, starts_at=starts_at, expires_at=starts_at + length)


async def _enqueue(backend: RedisBackend, *jobs: NewJob) -> list[str]:
    ids = await backend.enqueue_jobs(EnqueueJobsParams(jobs=list(jobs)))
    assert ids is not None
    return ids


async def _get(backend: RedisBackend, job_id: str) -> JobRecord:
    row = await backend.get_job(GetJobParams(job_id=job_id))
    assert row is not None, f"job {job_id} is gone"
    return row


async def _claim(backend: RedisBackend, *, limits: tuple[GroupLimit, ...] = ()) -> list[JobRecord]:
    return await backend.claim_jobs(
        ClaimJobsParams(worker_id="w1", queues=["default"], limit=10, mark_started=True, limits=limits)
    )


def _raw(backend: RedisBackend) -> Redis:
    client = backend._client
    assert client is not None
    return client


def _window_key(backend: RedisBackend, key: str) -> str:
    return backend.keys.key(f"window:{key}")


async def _expire_time(backend: RedisBackend, key: str) -> int:
    """The window key's absolute expiry in milliseconds (PEXPIRETIME)."""
    return int(await _raw(backend).execute_command("PEXPIRETIME", _window_key(backend, key)))


def _ceil_ms(moment: datetime) -> int:
    return -(-to_micros(moment) // 1000)


# -- unique windows ---------------------------------------------------------------


async def test_both_roles_are_declared() -> None:
    roles = RedisBackend.from_url("redis://127.0.0.1/0").capabilities.roles
    assert (roles["UniqueWindows"], roles["DebouncedJobs"]) == (1, 1)


async def test_a_window_is_a_hash_in_the_namespace_slot_that_expires_at_the_window_end(store: RedisBackend) -> None:
    now = datetime.now(UTC)
    # An end with a sub-millisecond part: the key's expiry is rounded up, never before the end.
    window = UniqueWindow(key="k:1", starts_at=now, expires_at=now + HOUR + timedelta(microseconds=1500))
    [first] = await _enqueue(store, _job(unique_window=window))
    wk = _window_key(store, "k:1")
    assert wk.startswith(store.keys.prefix)
    assert key_slot(wk.encode()) == key_slot(store.keys.schema.encode())
    fields = await _raw(store).hgetall(wk)
    assert fields == {"id": first, "expires_at": str(to_micros(window.expires_at))}
    assert await _expire_time(store, "k:1") == to_micros(window.expires_at) // 1000 + 1
    # A window job stores no dedup key and no debounce deadline.
    row = await _get(store, first)
    assert row.dedup_key is None
    assert row.status is JobStatus.QUEUED
    assert not await _raw(store).hexists(store.keys.job(first), "debounce_deadline")


async def test_a_window_holds_its_key_whatever_becomes_of_the_holder(store: RedisBackend) -> None:
    now = datetime.now(UTC)
    [held] = await _enqueue(store, _job(unique_window=_window("k", now)))

    async def repeat(starts_at: datetime) -> str:
        job = _job(unique_window=_window("k", starts_at), args={"n": 2})
        [stored] = await _enqueue(store, job)
        if stored != job.id:
            assert await store.get_job(GetJobParams(job_id=job.id)) is None
        return stored

    assert await repeat(now + timedelta(minutes=10)) == held
    # Claimed, then done: still held.
    [claimed] = await _claim(store)
    assert claimed.id == held
    assert await repeat(now + timedelta(minutes=20)) == held
    assert await store.complete_jobs(CompleteJobsParams(worker_id="w1", results=[JobResult(held, None)]))
    assert await repeat(now + timedelta(minutes=30)) == held
    # Deleted: the holder's id is still the answer.
    assert await store.delete_job(DeleteJobParams(job_id=held))
    assert await store.get_job(GetJobParams(job_id=held)) is None
    assert await repeat(now + timedelta(minutes=59)) == held
    # A window that starts when the stored one ends takes the key over.
    later = _job(unique_window=_window("k", now + HOUR))
    assert await _enqueue(store, later) == [later.id]
    fields = await _raw(store).hgetall(_window_key(store, "k"))
    assert fields == {"id": later.id, "expires_at": str(to_micros(now + 2 * HOUR))}
    assert await _expire_time(store, "k") == _ceil_ms(now + 2 * HOUR)
    assert (await _get(store, later.id)).status is JobStatus.QUEUED


async def test_cancel_and_dead_letter_release_no_window(store: RedisBackend) -> None:
    now = datetime.now(UTC)
    [cancelled] = await _enqueue(store, _job(unique_window=_window("c", now)))
    assert await store.cancel_job(CancelJobParams(job_id=cancelled))
    [dead] = await _enqueue(store, _job(unique_window=_window("d", now)))
    [claimed] = await _claim(store)
    assert claimed.id == dead
    await store.dead_letter_job(DeadLetterJobParams(job_id=dead, worker_id="w1", error="boom", reason="max_attempts"))
    assert await store.get_job(GetJobParams(job_id=dead)) is None
    assert await _enqueue(store, _job(unique_window=_window("c", now)), _job(unique_window=_window("d", now))) == [
        cancelled,
        dead,
    ]


async def test_a_batch_checks_windows_before_writing_any(store: RedisBackend) -> None:
    now = datetime.now(UTC)
    [held] = await _enqueue(store, _job(unique_window=_window("a", now)))
    fresh, repeat, other = (_job(unique_window=_window(key, now)) for key in ("b", "a", "c"))
    assert await _enqueue(store, fresh, repeat, other) == [fresh.id, held, other.id]
    # A batch that fails (a duplicate id) takes no window.
    doomed = _job(unique_window=_window("z", now))
    with pytest.raises(DuplicateJobError):
        await _enqueue(store, doomed, _job(), _clone(fresh))
    assert not await _raw(store).exists(_window_key(store, "z"))
    assert await store.get_job(GetJobParams(job_id=doomed.id)) is None
    again = _job(unique_window=_window("z", now))
    assert await _enqueue(store, again) == [again.id]


def _clone(job: NewJob) -> NewJob:
    """A job with `job`'s id (a duplicate) and nothing else of it."""
    return NewJob(
        id=job.id,
        job_name="tests.job",
        args={},
        queue="default",
        priority=100,
        scheduled_at=datetime.now(UTC),
        max_attempts=1,
    )


async def test_redis_drops_an_expired_window_on_its_own(store: RedisBackend) -> None:
    seconds, micros = await _raw(store).time()
    server_now = datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=micros)
    window = _window("short", server_now, timedelta(milliseconds=200))
    [first] = await _enqueue(store, _job(unique_window=window))
    wk = _window_key(store, "short")
    give_up = asyncio.get_running_loop().time() + 10
    while await _raw(store).exists(wk):
        assert asyncio.get_running_loop().time() < give_up, "the window key outlived its expiry by 10 s"
        await asyncio.sleep(0.02)
    # Gone: even a window starting inside the old one's span gets a row.
    repeat = _job(unique_window=window)
    assert await _enqueue(store, repeat) == [repeat.id] != [first]


# -- debounce -------------------------------------------------------------------------

# Both claim paths: the plain one, and the limited one under a limit that never binds.
ROOMY = (GroupLimit(scope=LimitScope.QUEUE, name="unused-queue", max_concurrent=1000),)


def _debounced(key: str, scheduled_at: datetime, deadline: datetime, n: int) -> NewJob:
    return _job(dedup_key=key, scheduled_at=scheduled_at, debounce_deadline=deadline, args={"n": n})


@pytest.mark.parametrize("limits", [(), ROOMY], ids=["plain", "limited"])
async def test_a_repeat_moves_the_queued_row_and_the_claim_follows_it(
    store: RedisBackend, limits: tuple[GroupLimit, ...]
) -> None:
    now = datetime.now(UTC)
    deadline = now + timedelta(seconds=30)
    sched = store.keys.key("sched:default")
    ready = store.keys.key("ready:default")
    [held] = await _enqueue(store, _debounced("d", now + timedelta(seconds=5), deadline, 1))
    assert await _raw(store).hget(store.keys.job(held), "debounce_deadline") == str(to_micros(deadline))
    first = await _get(store, held)
    assert first.dedup_key == "d"
    assert await _raw(store).zscore(sched, held) == to_micros(now + timedelta(seconds=5))

    # A repeat: its args, its later start; the holder keeps its id, deadline and created_at.
    repeat = _debounced("d", now + timedelta(seconds=10), now + timedelta(seconds=40), 2)
    assert await _enqueue(store, repeat) == [held]
    assert await store.get_job(GetJobParams(job_id=repeat.id)) is None
    moved = await _get(store, held)
    assert moved.args == {"n": 2}
    assert moved.scheduled_at == now + timedelta(seconds=10)
    assert moved.created_at == first.created_at
    assert moved.updated_at >= first.updated_at
    assert moved.dedup_key == "d"
    assert moved.status is JobStatus.QUEUED
    assert await _raw(store).hget(store.keys.job(held), "debounce_deadline") == str(to_micros(deadline))
    assert await _raw(store).zscore(sched, held) == to_micros(now + timedelta(seconds=10))

    # A start past the holder's deadline stops at the deadline.
    assert await _enqueue(store, _debounced("d", now + timedelta(seconds=60), now + HOUR, 3)) == [held]
    assert (await _get(store, held)).scheduled_at == deadline
    assert await _raw(store).zscore(sched, held) == to_micros(deadline)
    assert await _claim(store, limits=limits) == []

    # A repeat due now moves the row to the ready set: the claim takes it, with the last args.
    assert await _enqueue(store, _debounced("d", now - timedelta(seconds=1), now + HOUR, 4)) == [held]
    assert await _raw(store).zscore(sched, held) is None
    assert await _raw(store).zcard(ready) == 1
    [claimed] = await _claim(store, limits=limits)
    assert (claimed.id, claimed.args, claimed.dedup_key) == (held, {"n": 4}, None)

    # The claim released the key: the next repeat is a new queued row.
    after = _debounced("d", now + timedelta(seconds=5), now + HOUR, 5)
    assert await _enqueue(store, after) == [after.id]
    assert (await _get(store, held)).args == {"n": 4}


@pytest.mark.parametrize("limits", [(), ROOMY], ids=["plain", "limited"])
async def test_a_repeat_pushes_a_due_row_out_of_the_claim(store: RedisBackend, limits: tuple[GroupLimit, ...]) -> None:
    now = datetime.now(UTC)
    [held] = await _enqueue(store, _debounced("due", now - timedelta(seconds=1), now + HOUR, 1))
    assert await _raw(store).zcard(store.keys.key("ready:default")) == 1
    assert await _enqueue(store, _debounced("due", now + timedelta(minutes=5), now + HOUR, 2)) == [held]
    assert await _raw(store).zcard(store.keys.key("ready:default")) == 0
    assert await _claim(store, limits=limits) == []
    row = await _get(store, held)
    assert (row.args, row.scheduled_at, row.status) == ({"n": 2}, now + timedelta(minutes=5), JobStatus.QUEUED)


async def test_a_holder_not_stored_debounced_is_left_as_it_is(store: RedisBackend) -> None:
    now = datetime.now(UTC)
    # A plain keyed holder (as a row an older soniq-redis wrote): a debounced repeat leaves it be.
    [plain] = await _enqueue(store, _job(dedup_key="p", scheduled_at=now + HOUR, args={"n": 1}))
    before = await _raw(store).hgetall(store.keys.job(plain))
    assert await _enqueue(store, _debounced("p", now, now + HOUR, 2)) == [plain]
    assert await _raw(store).hgetall(store.keys.job(plain)) == before
    # A debounced holder: a plain keyed repeat leaves it be too.
    [debounced] = await _enqueue(store, _debounced("q", now + timedelta(minutes=1), now + HOUR, 1))
    before = await _raw(store).hgetall(store.keys.job(debounced))
    assert await _enqueue(store, _job(dedup_key="q", args={"n": 2})) == [debounced]
    assert await _raw(store).hgetall(store.keys.job(debounced)) == before


async def test_a_failing_batch_moves_no_holder(store: RedisBackend) -> None:
    now = datetime.now(UTC)
    [held] = await _enqueue(store, _debounced("f", now + timedelta(minutes=1), now + HOUR, 1))
    before = await _raw(store).hgetall(store.keys.job(held))
    existing = await _get(store, held)
    duplicate = NewJob(
        id=existing.id,
        job_name="tests.job",
        args={},
        queue="default",
        priority=100,
        scheduled_at=now,
        max_attempts=1,
    )
    with pytest.raises(DuplicateJobError):
        await _enqueue(store, _debounced("f", now, now + HOUR, 2), duplicate)
    assert await _raw(store).hgetall(store.keys.job(held)) == before


# -- producers in several processes racing on one key ----------------------------------

PRODUCER = r"""
import asyncio, json, sys, uuid
from datetime import UTC, datetime, timedelta

from soniq.params import EnqueueJobsParams
from soniq.records import NewJob, UniqueWindow
from soniq_redis import RedisBackend
from soniq_redis.connection import DuplicateJobError

URL, NAMESPACE, PRODUCER, ROUNDS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])


def job(name, r, **fields):
    return NewJob(id=str(uuid.uuid4()), job_name=f"{name}.{r}", args={"producer": PRODUCER, "round": r},
                  queue="default", priority=100, max_attempts=3, **fields)


async def main():
    backend = RedisBackend.from_url(URL, namespace=NAMESPACE)
    await backend.connect()
    try:
        for r in range(ROUNDS):
            print("ready", flush=True)
            sys.stdin.readline()  # the go signal: every producer enqueues at once
            now = datetime.now(UTC)
            window = job("race.window", r, scheduled_at=now + timedelta(hours=1),
                         unique_window=UniqueWindow(f"w{r}", now, now + timedelta(hours=1)))
            debounced = job("race.debounce", r, scheduled_at=now + timedelta(minutes=5),
                            dedup_key=f"d{r}", debounce_deadline=now + timedelta(minutes=10))
            order = [window, debounced] if PRODUCER % 2 else [debounced, window]
            ids = {}
            for one in order:
                [ids[one.job_name.split(".")[1]]] = await backend.enqueue_jobs(EnqueueJobsParams(jobs=[one]))
            print(json.dumps(ids), flush=True)
    finally:
        await backend.close()


asyncio.run(main())
"""

PRODUCERS = 6
ROUNDS = 15


async def _line(process: asyncio.subprocess.Process) -> str:
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
    if not line:
        assert process.stderr is not None
        error = (await process.stderr.read()).decode(errors="replace")
        raise AssertionError(f"a producer exited early ({process.returncode}): {error}")
    return line.decode().strip()


async def test_producers_in_several_processes_store_one_row_per_window_and_per_debounce_key(
    store: RedisBackend,
) -> None:
    url = CLUSTER_URL if store._target.cluster else REDIS_URL
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            PRODUCER,
            url,
            str(store.keys.namespace),
            str(producer),
            str(ROUNDS),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for producer in range(PRODUCERS)
    ]
    replies: list[list[dict[str, str]]] = []
    try:
        for _ in range(ROUNDS):
            for process in processes:
                assert await _line(process) == "ready"
            for process in processes:  # one write each, after every producer is waiting
                assert process.stdin is not None
                process.stdin.write(b"go\n")
            for process in processes:
                assert process.stdin is not None
                await process.stdin.drain()
            replies.append([json.loads(await _line(process)) for process in processes])
        for process in processes:
            assert await asyncio.wait_for(process.wait(), timeout=60) == 0
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()

    for r, answers in enumerate(replies):
        window_rows = (await store.job_page(JobPageParams(job_name=f"race.window.{r}", limit=100))).rows
        assert len(window_rows) == 1, f"round {r}: {len(window_rows)} rows for one window"
        assert {answer["window"] for answer in answers} == {window_rows[0].id}
        assert await _raw(store).hget(_window_key(store, f"w{r}"), "id") == window_rows[0].id

        debounce_rows = (await store.job_page(JobPageParams(job_name=f"race.debounce.{r}", limit=100))).rows
        assert len(debounce_rows) == 1, f"round {r}: {len(debounce_rows)} rows for one debounce key"
        row = debounce_rows[0]
        assert row.status is JobStatus.QUEUED
        assert row.dedup_key == f"d{r}"
        assert {answer["debounce"] for answer in answers} == {row.id}
        assert row.args in [{"producer": producer, "round": r} for producer in range(PRODUCERS)]
        deadline = await _raw(store).hget(store.keys.job(row.id), "debounce_deadline")
        assert deadline is not None
        assert to_micros(row.scheduled_at) <= int(deadline)
        assert await _raw(store).zscore(store.keys.key("sched:default"), row.id) == to_micros(row.scheduled_at)
