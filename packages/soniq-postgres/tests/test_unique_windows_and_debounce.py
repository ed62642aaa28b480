"""Unique windows and debounced jobs on PostgreSQL: the window table and the debounce move are each
part of one INSERT ... ON CONFLICT, so producers in separate processes, each on its own
connection, store one row per window and one queued row per debounce key, and all get its id."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from soniq.errors import UnknownDependencyError
from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeleteJobParams,
    EnqueueJobsParams,
    GetJobParams,
    JobResult,
    PruneJobsParams,
)
from soniq.records import JobStatus, NewJob, UniqueWindow
from soniq_postgres import PostgresBackend

pytestmark = pytest.mark.asyncio

JobFactory = Callable[..., NewJob]


def window(key: str, starts_at: datetime, seconds: float = 3600.0) -> UniqueWindow:
    return UniqueWindow(key=key, starts_at=starts_at, expires_at=starts_at + timedelta(seconds=seconds))


async def enqueue(backend: PostgresBackend, *jobs: NewJob, connection: Any = None) -> list[str]:
    ids = await backend.enqueue_jobs(EnqueueJobsParams(jobs=list(jobs), connection=connection))
    assert ids is not None
    return ids


async def window_rows(raw: asyncpg.Connection, namespace: str) -> dict[str, tuple[str, datetime]]:
    rows = await raw.fetch(f'SELECT key, job_id, expires_at FROM "{namespace}".soniq_unique_windows')
    return {row["key"]: (row["job_id"], row["expires_at"]) for row in rows}


async def test_both_roles_are_declared(backend: PostgresBackend) -> None:
    assert backend.capabilities.roles["UniqueWindows"] == 1
    assert backend.capabilities.roles["DebouncedJobs"] == 1


# -- unique windows -----------------------------------------------------------------


async def test_a_window_holds_its_key_through_every_end_of_its_job(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: JobFactory
) -> None:
    now = datetime.now(UTC)
    first = make_job(unique_window=window("report", now))
    assert await enqueue(backend, first) == [first.id]

    # Claimed, completed, then deleted: every later enqueue in the window gets the first id and stores nothing.
    repeats = [make_job(unique_window=window("report", now + timedelta(seconds=s))) for s in (1, 2, 3, 4)]
    assert await enqueue(backend, repeats[0]) == [first.id]
    (claimed,) = await backend.claim_jobs(ClaimJobsParams("w", None, 5, mark_started=True))
    assert claimed.id == first.id
    assert await enqueue(backend, repeats[1]) == [first.id]
    assert await backend.complete_jobs(CompleteJobsParams("w", (JobResult(first.id, None),))) == {first.id}
    assert await enqueue(backend, repeats[2]) == [first.id]
    assert await backend.delete_job(DeleteJobParams(first.id))
    assert await enqueue(backend, repeats[3]) == [first.id]
    for repeat in repeats:
        assert await backend.get_job(GetJobParams(repeat.id)) is None
    assert await raw.fetchval(f'SELECT count(*) FROM "{namespace}".soniq_jobs') == 0
    assert (await window_rows(raw, namespace))["report"][0] == first.id


async def test_a_dead_lettered_holder_still_holds_its_window(backend: PostgresBackend, make_job: JobFactory) -> None:
    now = datetime.now(UTC)
    first = make_job(unique_window=window("nightly", now))
    await enqueue(backend, first)
    await backend.claim_jobs(ClaimJobsParams("w", None, 1, mark_started=True))
    assert await backend.dead_letter_job(DeadLetterJobParams(first.id, "w", "boom", "max_attempts"))
    again = make_job(unique_window=window("nightly", now + timedelta(minutes=5)))
    assert await enqueue(backend, again) == [first.id]
    assert await backend.get_job(GetJobParams(again.id)) is None


async def test_a_window_ends_at_its_expiry_and_the_next_job_takes_the_key(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: JobFactory
) -> None:
    start = datetime.now(UTC)
    first = make_job(unique_window=window("sync", start, seconds=60))
    await enqueue(backend, first)
    # A start one microsecond before the expiry is still inside the window ...
    inside = make_job(unique_window=window("sync", start + timedelta(seconds=60, microseconds=-1), seconds=60))
    assert await enqueue(backend, inside) == [first.id]
    # ... a start at the expiry is not: the key goes to the new job, with the new bounds, even
    # though the first job is still queued.
    second = make_job(unique_window=window("sync", start + timedelta(seconds=60), seconds=60))
    assert await enqueue(backend, second) == [second.id]
    assert (await window_rows(raw, namespace))["sync"] == (second.id, start + timedelta(seconds=120))
    third = make_job(unique_window=window("sync", start + timedelta(seconds=90)))
    assert await enqueue(backend, third) == [second.id]
    stored = {row["id"] for row in await raw.fetch(f'SELECT id FROM "{namespace}".soniq_jobs')}
    assert stored == {first.id, second.id}


async def test_one_call_mixes_windows_dedup_keys_and_plain_jobs(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: JobFactory
) -> None:
    now = datetime.now(UTC)
    holder = make_job(unique_window=window("held", now))
    keyed_holder = make_job(dedup_key="k")
    await enqueue(backend, holder, keyed_holder)

    plain = make_job()
    keyed = make_job(dedup_key="k")
    held = make_job(unique_window=window("held", now + timedelta(seconds=1)))
    fresh = make_job(unique_window=window("fresh", now))
    new_key = make_job(dedup_key="k2")
    ids = await enqueue(backend, plain, held, keyed, fresh, new_key)

    assert ids == [plain.id, holder.id, keyed_holder.id, fresh.id, new_key.id]
    stored = {row["id"] for row in await raw.fetch(f'SELECT id FROM "{namespace}".soniq_jobs')}
    assert stored == {holder.id, keyed_holder.id, plain.id, fresh.id, new_key.id}
    rows = await window_rows(raw, namespace)
    assert {key: job_id for key, (job_id, _) in rows.items()} == {"held": holder.id, "fresh": fresh.id}
    record = await backend.get_job(GetJobParams(fresh.id))
    assert record is not None
    assert (record.status, record.dedup_key) == (JobStatus.QUEUED, None)


async def test_a_window_taken_in_a_rolled_back_transaction_was_never_taken(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: JobFactory
) -> None:
    now = datetime.now(UTC)
    lost = make_job(unique_window=window("invoice", now))

    class AbortError(Exception):
        pass

    async def enqueue_then_fail() -> None:
        async with raw.transaction():
            assert await enqueue(backend, lost, connection=raw) == [lost.id]
            raise AbortError

    with pytest.raises(AbortError):
        await enqueue_then_fail()

    assert await window_rows(raw, namespace) == {}
    kept = make_job(unique_window=window("invoice", now))
    async with raw.transaction():
        assert await enqueue(backend, kept, connection=raw) == [kept.id]
    assert await enqueue(backend, make_job(unique_window=window("invoice", now))) == [kept.id]


async def test_a_dependent_of_a_held_window_job_waits_for_the_holder(
    backend: PostgresBackend, make_job: JobFactory
) -> None:
    """In one call with dependencies, a window job whose key is held stands for its holder."""
    now = datetime.now(UTC)
    holder = make_job(unique_window=window("build", now))
    await enqueue(backend, holder)

    held = make_job(unique_window=window("build", now + timedelta(seconds=1)))
    dependent = make_job(depends_on=(held.id,))
    fresh = make_job(unique_window=window("deploy", now))
    after_fresh = make_job(depends_on=(fresh.id,))
    ids = await enqueue(backend, held, dependent, fresh, after_fresh)

    assert ids == [holder.id, dependent.id, fresh.id, after_fresh.id]
    assert await backend.get_job(GetJobParams(held.id)) is None
    for waiting in (dependent, after_fresh):
        record = await backend.get_job(GetJobParams(waiting.id))
        assert record is not None
        assert (record.status, record.waiting_on) == (JobStatus.QUEUED, 1)

    # Only the holder and the fresh window job are claimable; finishing the holder frees its dependent.
    claimed = await backend.claim_jobs(ClaimJobsParams("w", None, 10, mark_started=True))
    assert {job.id for job in claimed} == {holder.id, fresh.id}
    assert await backend.complete_jobs(CompleteJobsParams("w", (JobResult(holder.id, None),))) == {holder.id}
    (freed,) = await backend.claim_jobs(ClaimJobsParams("w", None, 10, mark_started=True))
    assert freed.id == dependent.id


async def test_a_dependency_on_a_held_window_whose_holder_is_gone_is_unknown(
    backend: PostgresBackend, make_job: JobFactory
) -> None:
    now = datetime.now(UTC)
    holder = make_job(unique_window=window("gone", now))
    await enqueue(backend, holder)
    assert await backend.delete_job(DeleteJobParams(holder.id))

    held = make_job(unique_window=window("gone", now + timedelta(seconds=1)))
    dependent = make_job(depends_on=(held.id,))
    with pytest.raises(UnknownDependencyError) as raised:
        await enqueue(backend, held, dependent)
    assert raised.value.missing == (held.id,)
    assert await backend.get_job(GetJobParams(dependent.id)) is None


# -- debounced jobs -----------------------------------------------------------------


async def debounce_deadline(raw: asyncpg.Connection, namespace: str, job_id: str) -> datetime | None:
    value: datetime | None = await raw.fetchval(
        f'SELECT debounce_deadline FROM "{namespace}".soniq_jobs WHERE id = $1', job_id
    )
    return value


async def test_a_repeat_moves_the_queued_row_but_never_past_its_deadline(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: JobFactory
) -> None:
    first_seen = datetime.now(UTC)
    deadline = first_seen + timedelta(seconds=100)
    first = make_job(
        args={"n": 1},
        dedup_key="debounce:k",
        scheduled_at=first_seen + timedelta(seconds=10),
        debounce_deadline=deadline,
    )
    assert await enqueue(backend, first) == [first.id]
    assert await debounce_deadline(raw, namespace, first.id) == deadline
    stored = await backend.get_job(GetJobParams(first.id))
    assert stored is not None

    second = make_job(
        args={"n": 2},
        dedup_key="debounce:k",
        scheduled_at=first_seen + timedelta(seconds=50),
        debounce_deadline=deadline,
    )
    assert await enqueue(backend, second) == [first.id]
    moved = await backend.get_job(GetJobParams(first.id))
    assert moved is not None
    assert (moved.args, moved.scheduled_at) == ({"n": 2}, first_seen + timedelta(seconds=50))
    assert moved.created_at == stored.created_at
    assert moved.updated_at > stored.updated_at

    # The producer's deadline is its own first enqueue's; the row keeps the one it was stored with.
    third = make_job(
        args={"n": 3},
        dedup_key="debounce:k",
        scheduled_at=first_seen + timedelta(seconds=500),
        debounce_deadline=first_seen + timedelta(seconds=900),
    )
    assert await enqueue(backend, third) == [first.id]
    last = await backend.get_job(GetJobParams(first.id))
    assert last is not None
    assert (last.args, last.scheduled_at) == ({"n": 3}, deadline)
    assert await debounce_deadline(raw, namespace, first.id) == deadline
    assert await raw.fetchval(f'SELECT count(*) FROM "{namespace}".soniq_jobs') == 1


async def test_a_plain_keyed_holder_or_repeat_moves_nothing(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: JobFactory
) -> None:
    now = datetime.now(UTC)
    later = now + timedelta(seconds=30)
    plain_holder = make_job(args={"v": "plain"}, dedup_key="a", scheduled_at=now)
    debounced_holder = make_job(args={"v": "debounced"}, dedup_key="b", scheduled_at=now, debounce_deadline=later)
    await enqueue(backend, plain_holder, debounced_holder)
    assert await debounce_deadline(raw, namespace, plain_holder.id) is None

    # A debounced repeat of a plain holder, and a plain repeat of a debounced one.
    ids = await enqueue(
        backend,
        make_job(args={"v": "new"}, dedup_key="a", scheduled_at=later, debounce_deadline=later),
        make_job(args={"v": "new"}, dedup_key="b", scheduled_at=later),
    )
    assert ids == [plain_holder.id, debounced_holder.id]
    for holder in (plain_holder, debounced_holder):
        record = await backend.get_job(GetJobParams(holder.id))
        assert record is not None
        assert (record.args, record.scheduled_at) == (holder.args, now)


async def test_a_moved_start_is_what_the_claim_sees(backend: PostgresBackend, make_job: JobFactory) -> None:
    now = datetime.now(UTC)
    first = make_job(dedup_key="d", scheduled_at=now + timedelta(hours=1), debounce_deadline=now + timedelta(hours=2))
    await enqueue(backend, first)
    assert await backend.claim_jobs(ClaimJobsParams("w", None, 1, mark_started=True)) == []

    # A repeat whose start is already past (as after a long debounce_max_wait) makes the row due.
    due = make_job(args={"x": 1}, dedup_key="d", scheduled_at=now - timedelta(seconds=1), debounce_deadline=now)
    assert await enqueue(backend, due) == [first.id]
    (claimed,) = await backend.claim_jobs(ClaimJobsParams("w", None, 1, mark_started=True))
    assert (claimed.id, claimed.args) == (first.id, {"x": 1})

    # The claim released the key: the next repeat starts a new queued row.
    after = make_job(dedup_key="d", scheduled_at=now + timedelta(hours=1), debounce_deadline=now + timedelta(hours=2))
    assert await enqueue(backend, after) == [after.id]


async def test_a_debounced_repeat_in_a_call_with_dependencies_moves_the_holder(
    backend: PostgresBackend, make_job: JobFactory
) -> None:
    now = datetime.now(UTC)
    holder = make_job(args={"n": 1}, dedup_key="d", scheduled_at=now, debounce_deadline=now + timedelta(minutes=1))
    parent = make_job()
    await enqueue(backend, holder, parent)
    repeat = make_job(
        args={"n": 2},
        dedup_key="d",
        scheduled_at=now + timedelta(seconds=5),
        debounce_deadline=now + timedelta(minutes=9),
    )
    child = make_job(depends_on=(parent.id,))
    assert await enqueue(backend, repeat, child) == [holder.id, child.id]
    record = await backend.get_job(GetJobParams(holder.id))
    assert record is not None
    assert (record.args, record.scheduled_at) == ({"n": 2}, now + timedelta(seconds=5))


# -- pruning ------------------------------------------------------------------------


async def test_prune_deletes_expired_windows_after_finished_rows_within_its_limit(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    await backend.setup()
    past, future = datetime.now(UTC) - timedelta(hours=1), datetime.now(UTC) + timedelta(hours=1)
    await raw.execute(
        f"""INSERT INTO "{namespace}".soniq_jobs (id, job_name, status, queue, expires_at)
            SELECT 'done-' || g, 'app.job', 'done', 'default', $1 FROM generate_series(1, 2) AS g""",
        past,
    )
    await raw.execute(
        f"""INSERT INTO "{namespace}".soniq_unique_windows (key, job_id, starts_at, expires_at)
            SELECT 'old-' || g, 'j-' || g, $1::timestamptz - interval '1 hour', $1 FROM generate_series(1, 5) AS g
            UNION ALL
            SELECT 'live-' || g, 'k-' || g, $1, $2 FROM generate_series(1, 3) AS g""",
        past,
        future,
    )

    # Both rows, then two windows with what is left of the limit; only the job rows are counted.
    assert await backend.prune_jobs(PruneJobsParams(limit=4)) == 2
    assert await raw.fetchval(f'SELECT count(*) FROM "{namespace}".soniq_jobs') == 0
    assert len(await window_rows(raw, namespace)) == 6
    assert await backend.prune_jobs(PruneJobsParams(limit=2)) == 0  # no job row left: two windows
    assert len(await window_rows(raw, namespace)) == 4
    assert await backend.prune_jobs(PruneJobsParams(limit=4)) == 0
    assert set(await window_rows(raw, namespace)) == {"live-1", "live-2", "live-3"}
    # A `now` in the future moves the job rows' cut-off, never a live window's end.
    assert await backend.prune_jobs(PruneJobsParams(now=future, limit=10)) == 0
    assert set(await window_rows(raw, namespace)) == {"live-1", "live-2", "live-3"}


async def test_prune_counts_job_rows_only_and_leaves_windows_to_the_call_with_room(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    """The leader logs what prune_jobs returns as "finished job rows" and calls again while it
    returns the limit: windows are never counted, and a call the job rows fill deletes none."""
    await backend.setup()
    past = datetime.now(UTC) - timedelta(hours=1)
    await raw.execute(
        f"""INSERT INTO "{namespace}".soniq_jobs (id, job_name, status, queue, expires_at)
            SELECT 'done-' || g, 'app.job', 'done', 'default', $1 FROM generate_series(1, 5) AS g""",
        past,
    )
    await raw.execute(
        f"""INSERT INTO "{namespace}".soniq_unique_windows (key, job_id, starts_at, expires_at)
            SELECT 'old-' || g, 'j-' || g, $1::timestamptz - interval '1 hour', $1 FROM generate_series(1, 4) AS g""",
        past,
    )

    assert await backend.prune_jobs(PruneJobsParams(limit=3)) == 3  # full of job rows: call again
    assert len(await window_rows(raw, namespace)) == 4
    assert await backend.prune_jobs(PruneJobsParams(limit=3)) == 2  # the rest, and one window
    assert await raw.fetchval(f'SELECT count(*) FROM "{namespace}".soniq_jobs') == 0
    assert len(await window_rows(raw, namespace)) == 3
    assert await backend.prune_jobs(PruneJobsParams(limit=3)) == 0  # windows alone are not job rows
    assert len(await window_rows(raw, namespace)) == 0


async def test_a_key_whose_window_was_pruned_goes_to_the_next_job(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, make_job: JobFactory
) -> None:
    start = datetime.now(UTC) - timedelta(minutes=2)
    first = make_job(unique_window=window("k", start, seconds=60))
    await enqueue(backend, first)
    assert await backend.prune_jobs(PruneJobsParams(limit=10)) == 0  # a window is not a job row
    assert await window_rows(raw, namespace) == {}
    second = make_job(unique_window=window("k", datetime.now(UTC)))
    assert await enqueue(backend, second) == [second.id]


# -- producers in separate processes ------------------------------------------------------

PRODUCER = """
import asyncio, json, sys, uuid
from datetime import datetime, timedelta, timezone
import asyncpg
from soniq.params import EnqueueJobsParams
from soniq.records import NewJob, UniqueWindow
from soniq_postgres import PostgresBackend

url, namespace, mode = sys.argv[1], sys.argv[2], sys.argv[3]
producer, rounds, keys_per_call = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
start = datetime.fromisoformat(sys.argv[7])


def job(name, **fields):
    scheduled = fields.pop("scheduled_at", datetime.now(timezone.utc))
    return NewJob(id=str(uuid.uuid4()), job_name=name, args={"producer": producer}, queue="default",
                  priority=100, scheduled_at=scheduled, max_attempts=1, **fields)


def calls(r):
    # Each producer's window starts a little apart, all inside the one that takes the key.
    began = start + timedelta(milliseconds=producer)
    yield [f"w{r}"], [job(f"race.window.{r}", unique_window=UniqueWindow(f"w{r}", began, start + timedelta(hours=1)))]
    yield [f"d{r}"], [job(f"race.debounce.{r}", dedup_key=f"d{r}",
                          scheduled_at=start + timedelta(seconds=10 + producer),
                          debounce_deadline=start + timedelta(seconds=60))]
    # Several keys in one call, in an order of this producer's own: none may wait on another in a cycle.
    keys = [f"m{r}.{k}" for k in range(keys_per_call)]
    keys = keys[producer % keys_per_call:] + keys[:producer % keys_per_call]
    keys = keys if producer % 2 else keys[::-1]
    yield keys, [job(f"race.many.{key}", unique_window=UniqueWindow(key, began, start + timedelta(hours=1)))
                 for key in keys]


async def main():
    backend = PostgresBackend.from_url(url, namespace=namespace, max_size=1, listen=False)
    await backend.connect()
    connection = await asyncpg.connect(url, server_settings={"application_name": f"race-{namespace}"})
    loop = asyncio.get_running_loop()

    async def told():
        return (await loop.run_in_executor(None, sys.stdin.readline)).strip()

    print("ready", flush=True)
    if mode == "free":
        assert await told() == "go"
    for r in range(rounds):
        for keys, jobs in calls(r):
            if mode == "free":
                ids = await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
                print("enqueued " + json.dumps(dict(zip(keys, ids))), flush=True)
                continue
            # In step: start when told, and hold the transaction that enqueued until told to commit.
            assert await told() == "go"
            async with connection.transaction():
                ids = await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs, connection=connection))
                print("enqueued " + json.dumps(dict(zip(keys, ids))), flush=True)
                assert await told() == "commit"
            print("committed", flush=True)
    await connection.close()
    await backend.close()

asyncio.run(main())
"""

PRODUCERS = 5
KEYS_PER_CALL = 4
CALLS_PER_ROUND = 3


class Producers:
    """Producer processes, each on its own connections, and the lines they print."""

    def __init__(self, processes: list[asyncio.subprocess.Process]) -> None:
        self.processes = processes
        self.lines: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
        self.readers = [asyncio.ensure_future(self._read(index)) for index in range(len(processes))]
        self.got: list[dict[str, str]] = [{} for _ in processes]

    @classmethod
    async def start(cls, pg_url: str, namespace: str, mode: str, rounds: int, start: datetime) -> Producers:
        processes = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                PRODUCER,
                pg_url,
                namespace,
                mode,
                str(producer),
                str(rounds),
                str(KEYS_PER_CALL),
                start.isoformat(),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            for producer in range(PRODUCERS)
        ]
        return cls(processes)

    async def _read(self, index: int) -> None:
        stdout = self.processes[index].stdout
        assert stdout is not None
        async for raw_line in stdout:
            await self.lines.put((index, raw_line.decode().strip()))
        await self.lines.put((index, "<exit>"))

    async def next_line(self) -> tuple[int, str]:
        """The next line any producer printed; a producer that ended successfully says nothing more."""
        while True:
            try:
                index, line = await asyncio.wait_for(self.lines.get(), timeout=60)
            except TimeoutError:
                pytest.fail("no producer said anything for 60 s")
            if line != "<exit>":
                break
            process = self.processes[index]
            if await asyncio.wait_for(process.wait(), timeout=60) != 0:
                assert process.stderr is not None
                pytest.fail(f"producer {index} failed: {(await process.stderr.read()).decode()}")
        if line.startswith("enqueued "):
            self.got[index].update(json.loads(line.removeprefix("enqueued ")))
        return index, line

    async def tell(self, index: int, word: str) -> None:
        stdin = self.processes[index].stdin
        assert stdin is not None
        stdin.write(f"{word}\n".encode())
        await stdin.drain()

    async def expect(self, word: str, count: int) -> None:
        for _ in range(count):
            _, line = await self.next_line()
            assert line.split(" ", 1)[0] == word, line

    async def finish(self) -> None:
        """Every producer exits, successfully."""
        for index, process in enumerate(self.processes):
            code = await asyncio.wait_for(process.wait(), timeout=60)
            stderr = process.stderr
            assert stderr is not None
            assert code == 0, f"producer {index} failed: {(await stderr.read()).decode()}"

    async def close(self) -> None:
        for process in self.processes:
            if process.returncode is None:
                process.kill()
            await process.wait()
        for reader in self.readers:
            reader.cancel()


async def check_one_row_per_key(
    raw: asyncpg.Connection, namespace: str, rounds: int, start: datetime, got: list[dict[str, str]]
) -> None:
    """Every window and debounce key has exactly one row, and every producer got its id."""
    jobs = f'"{namespace}".soniq_jobs'
    windows = await window_rows(raw, namespace)
    assert len(windows) == rounds * (1 + KEYS_PER_CALL)
    for r in range(rounds):
        for key in [f"w{r}", *(f"m{r}.{k}" for k in range(KEYS_PER_CALL))]:
            name = f"race.window.{r}" if key.startswith("w") else f"race.many.{key}"
            rows = await raw.fetch(f"SELECT id FROM {jobs} WHERE job_name = $1", name)
            assert len(rows) == 1, (key, rows)
            assert windows[key][0] == rows[0]["id"]
            assert {ids[key] for ids in got} == {rows[0]["id"]}, key

        rows = await raw.fetch(
            f"SELECT id, args::text AS args, scheduled_at, debounce_deadline FROM {jobs} WHERE job_name = $1",
            f"race.debounce.{r}",
        )
        assert len(rows) == 1, rows
        (row,) = rows
        assert await raw.fetchval(f"SELECT dedup_key FROM {jobs} WHERE id = $1 AND status = 'queued'", row["id"]) == (
            f"d{r}"
        )
        # One producer's enqueue, whole: its arguments with its start, within the stored deadline.
        producer = json.loads(row["args"])["producer"]
        assert producer in range(PRODUCERS)
        assert row["scheduled_at"] == start + timedelta(seconds=10 + producer)
        assert row["debounce_deadline"] == start + timedelta(seconds=60)
        assert {ids[f"d{r}"] for ids in got} == {row["id"]}


async def test_producers_racing_freely_store_one_row_per_window_and_per_debounce_key(
    pg_url: str, backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    """Each producer enqueues on its own pool as fast as it can, all released at once."""
    await backend.setup()
    rounds, start = 10, datetime.now(UTC)
    producers = await Producers.start(pg_url, namespace, "free", rounds, start)
    try:
        await producers.expect("ready", PRODUCERS)
        for index in range(PRODUCERS):
            await producers.tell(index, "go")
        await producers.expect("enqueued", PRODUCERS * rounds * CALLS_PER_ROUND)
        await producers.finish()
    finally:
        await producers.close()
    await check_one_row_per_key(raw, namespace, rounds, start, producers.got)


async def test_producers_waiting_on_an_uncommitted_key_all_get_the_row_it_stored(
    pg_url: str,
    backend: PostgresBackend,
    raw: asyncpg.Connection,
    namespace: str,
    wait_until: Callable[..., Awaitable[None]],
) -> None:
    """In step: every producer enqueues the same keys inside a transaction of its own; the first
    holds its transaction open until every other one is seen waiting on a lock in PostgreSQL, so
    each enqueue meets an uncommitted holder. Then each commits as soon as it has enqueued."""
    await backend.setup()
    rounds, start = 3, datetime.now(UTC)
    producers = await Producers.start(pg_url, namespace, "step", rounds, start)

    async def waiting() -> int:
        count: int = await raw.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
            f"race-{namespace}",
        )
        return count

    try:
        await producers.expect("ready", PRODUCERS)
        for _ in range(rounds * CALLS_PER_ROUND):
            for index in range(PRODUCERS):
                await producers.tell(index, "go")
            first, line = await producers.next_line()
            assert line.startswith("enqueued "), line
            await wait_until(lambda: _equals(waiting, PRODUCERS - 1), what="every other producer waits on a lock")
            committed = 0
            await producers.tell(first, "commit")
            while committed < PRODUCERS:
                index, line = await producers.next_line()
                if line.startswith("enqueued "):
                    await producers.tell(index, "commit")
                else:
                    assert line == "committed", line
                    committed += 1
        await producers.finish()
    finally:
        await producers.close()
    await check_one_row_per_key(raw, namespace, rounds, start, producers.got)


async def _equals(count: Callable[[], Awaitable[int]], expected: int) -> bool:
    return await count() == expected
