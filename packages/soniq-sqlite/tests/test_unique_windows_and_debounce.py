"""Unique windows (`UniqueWindows`) and debounced jobs (`DebouncedJobs`) on SQLite, schema version 9:
what the file keeps per key, what a repeat enqueue does, producer processes racing on one key, and
the upgrade of a populated version-8 file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from soniq.params import (
    CancelJobParams,
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeleteJobParams,
    EnqueueJobsParams,
    GetJobParams,
    JobResult,
    PruneJobsParams,
)
from soniq.records import JobRecord, NewJob, UniqueWindow
from soniq_sqlite import SQLiteBackend
from soniq_sqlite.codec import to_us
from soniq_sqlite.schema import MIGRATIONS, SCHEMA_VERSION

pytestmark = pytest.mark.asyncio

SCRIPT = Path(__file__).with_name("producer_process.py")


def _job(**fields: object) -> NewJob:
    values: dict[str, object] = {
        "id": str(uuid.uuid4()),
        "job_name": "tests.keyed",
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


async def _enqueue(backend: SQLiteBackend, *jobs: NewJob) -> list[str]:
    stored = await backend.enqueue_jobs(EnqueueJobsParams(jobs=list(jobs)))
    assert stored is not None
    return stored


async def _row(backend: SQLiteBackend, job_id: str) -> JobRecord:
    row = await backend.get_job(GetJobParams(job_id=job_id))
    assert row is not None
    return row


def _windows(raw: sqlite3.Connection) -> dict[str, tuple[str, int]]:
    return {
        str(key): (str(job_id), int(expires))
        for key, job_id, expires in raw.execute("SELECT * FROM soniq_unique_windows")
    }


def _job_count(raw: sqlite3.Connection) -> int:
    return int(raw.execute("SELECT count(*) FROM soniq_jobs").fetchone()[0])


async def test_both_roles_are_declared(backend: SQLiteBackend) -> None:
    roles = backend.capabilities.roles
    assert (roles["UniqueWindows"], roles["DebouncedJobs"]) == (1, 1)


# -- unique windows ---------------------------------------------------------------


async def test_a_window_returns_its_holder_whatever_became_of_the_row(
    backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    first = _job(unique_window=_window("k", datetime.now(UTC)))
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
    assert _job_count(raw) == 0, "no repeat was stored"
    assert _windows(raw) == {"k": (first.id, to_us(first.unique_window.expires_at))}  # type: ignore[union-attr]


async def test_a_cancelled_or_dead_lettered_holder_keeps_its_window(
    backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    now = datetime.now(UTC)
    cancelled, dead = _job(unique_window=_window("c", now)), _job(unique_window=_window("d", now))
    await _enqueue(backend, cancelled)
    assert await backend.cancel_job(CancelJobParams(job_id=cancelled.id))
    await _enqueue(backend, dead)
    (row,) = await backend.claim_jobs(_claim())
    assert await backend.dead_letter_job(DeadLetterJobParams(job_id=row.id, worker_id="w", error="x", reason="failed"))
    later = datetime.now(UTC)
    repeats = (_job(unique_window=_window("c", later)), _job(unique_window=_window("d", later)))
    assert await _enqueue(backend, *repeats) == [cancelled.id, dead.id]
    assert _job_count(raw) == 1


async def test_a_window_ends_at_its_expiry_and_the_next_job_takes_the_key(
    backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    start = datetime.now(UTC) - timedelta(minutes=10)
    first = _job(unique_window=_window("k", start, 60))
    await _enqueue(backend, first)
    just_inside = _job(unique_window=_window("k", start + timedelta(seconds=60) - timedelta(microseconds=1)))
    assert await _enqueue(backend, just_inside) == [first.id]
    second = _job(unique_window=_window("k", start + timedelta(seconds=60), 60))
    assert await _enqueue(backend, second) == [second.id], "a window ending at the new start no longer holds"
    assert await _enqueue(backend, _job(unique_window=_window("k", start + timedelta(seconds=61)))) == [second.id]
    assert _job_count(raw) == 2
    assert _windows(raw) == {"k": (second.id, to_us(start + timedelta(seconds=120)))}


async def test_a_failed_batch_takes_no_window(backend: SQLiteBackend, raw: sqlite3.Connection) -> None:
    taken = _job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[taken]))
    windowed = _job(unique_window=_window("k", datetime.now(UTC)))
    with pytest.raises(sqlite3.IntegrityError):
        await _enqueue(backend, windowed, _job(id=taken.id, dedup_key="x"))
    assert _windows(raw) == {}
    assert await _enqueue(backend, windowed) == [windowed.id]


async def test_a_batch_with_dependencies_honours_windows_and_debounces(
    backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    now = datetime.now(UTC)
    deadline = now + timedelta(minutes=5)
    held = _job(unique_window=_window("w", now))
    holder = _job(dedup_key="d", args={"n": 1}, scheduled_at=now + timedelta(minutes=1), debounce_deadline=deadline)
    await _enqueue(backend, held, holder)
    dep = _job()
    child = _job(depends_on=(dep.id,))
    repeat_window = _job(unique_window=_window("w", now))
    repeat = _job(dedup_key="d", args={"n": 2}, scheduled_at=now + timedelta(minutes=2), debounce_deadline=deadline)
    assert await _enqueue(backend, dep, repeat_window, repeat, child) == [dep.id, held.id, holder.id, child.id]
    moved = await _row(backend, holder.id)
    assert (moved.args, moved.scheduled_at) == ({"n": 2}, now + timedelta(minutes=2))
    assert (await _row(backend, child.id)).waiting_on == 1
    assert _job_count(raw) == 4


async def test_prune_drops_only_ended_windows_bounded_by_its_limit(
    backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    past = datetime.now(UTC) - timedelta(hours=1)
    ended = [_job(unique_window=_window(f"old-{n}", past, 1)) for n in range(3)]
    live = _job(unique_window=_window("live", datetime.now(UTC), 3600))
    await _enqueue(backend, *ended, live)
    assert await backend.prune_jobs(PruneJobsParams(limit=2)) == 0, "windows are not counted as pruned jobs"
    assert len(_windows(raw)) == 2
    # A `now` far ahead prunes rows, not windows that still hold by the store's clock.
    await backend.prune_jobs(PruneJobsParams(now=datetime.now(UTC) + timedelta(days=1), limit=10))
    assert set(_windows(raw)) == {"live"}
    assert await _enqueue(backend, _job(unique_window=_window("live", datetime.now(UTC)))) == [live.id]


# -- debounced jobs ----------------------------------------------------------------


async def test_a_repeat_moves_the_queued_row_and_keeps_its_id_deadline_and_created_at(
    backend: SQLiteBackend, raw: sqlite3.Connection
) -> None:
    now = datetime.now(UTC)
    deadline = now + timedelta(seconds=30)
    first = _job(dedup_key="d", args={"n": 1}, scheduled_at=now + timedelta(seconds=5), debounce_deadline=deadline)
    await _enqueue(backend, first)
    before = await _row(backend, first.id)
    repeat = _job(dedup_key="d", args={"n": 2}, scheduled_at=now + timedelta(seconds=10), debounce_deadline=deadline)
    assert await _enqueue(backend, repeat) == [first.id]
    row = await _row(backend, first.id)
    assert (row.args, row.scheduled_at, row.dedup_key) == ({"n": 2}, now + timedelta(seconds=10), "d")
    assert row.created_at == before.created_at
    assert row.updated_at > before.updated_at
    # A later producer's deadline is later, but the row keeps its own: the start stops there.
    late_deadline = now + timedelta(hours=1)
    late = _job(dedup_key="d", args={"n": 3}, scheduled_at=now + timedelta(minutes=5), debounce_deadline=late_deadline)
    assert await _enqueue(backend, late) == [first.id]
    row = await _row(backend, first.id)
    assert (row.args, row.scheduled_at) == ({"n": 3}, deadline)
    assert raw.execute("SELECT id, debounce_deadline FROM soniq_jobs").fetchall() == [(first.id, to_us(deadline))]


async def test_the_claim_honours_a_moved_start(backend: SQLiteBackend) -> None:
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


async def test_a_holder_that_was_not_debounced_is_left_as_it_is_and_so_is_a_plain_repeat(
    backend: SQLiteBackend,
) -> None:
    now = datetime.now(UTC)
    plain = _job(dedup_key="p", args={"n": 1})
    await _enqueue(backend, plain)
    before = await _row(backend, plain.id)
    debounced = _job(dedup_key="p", args={"n": 2}, scheduled_at=now, debounce_deadline=now + timedelta(seconds=5))
    assert await _enqueue(backend, debounced) == [plain.id]
    assert await _row(backend, plain.id) == before

    holder = _job(dedup_key="q", args={"n": 1}, scheduled_at=now, debounce_deadline=now + timedelta(seconds=5))
    await _enqueue(backend, holder)
    before = await _row(backend, holder.id)
    assert await _enqueue(backend, _job(dedup_key="q", args={"n": 2})) == [holder.id]
    assert await _row(backend, holder.id) == before


async def test_a_claim_releases_the_key_and_the_next_enqueue_is_a_new_row(backend: SQLiteBackend) -> None:
    now = datetime.now(UTC)
    deadline = now + timedelta(seconds=9)
    first = _job(dedup_key="d", scheduled_at=now - timedelta(seconds=1), debounce_deadline=deadline)
    await _enqueue(backend, first)
    (claimed,) = await backend.claim_jobs(_claim())
    second = _job(dedup_key="d", args={"n": 2}, scheduled_at=now, debounce_deadline=deadline)
    assert await _enqueue(backend, second) == [second.id]
    assert (await _row(backend, claimed.id)).args == {}, "the running row keeps its args"


# -- producer processes racing on one key -------------------------------------------


def _race(kind: str, url: str, producers: int, keys: int) -> list[dict[str, dict[str, str]]]:
    """Start every producer process, wait until each is connected, release them at once, collect their JSON."""
    processes = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), kind, url, f"p{n}", str(keys)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(producers)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline().strip()
            assert line == "ready", process.stderr.read() if process.stderr else line
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        outcomes = []
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err
            outcomes.append(json.loads(out.strip().splitlines()[-1]))
        return outcomes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
def race_file(db_path: Path) -> str:
    """A file already at the latest schema, so the producers race on the keys, not on the setup."""
    with sqlite3.connect(db_path, isolation_level=None) as conn:
        conn.execute("PRAGMA journal_mode = wal")
        for step in range(1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[step]:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return f"sqlite:///{db_path}"


PRODUCERS, KEYS = 5, 20


def _one_id_per_key(outcomes: list[dict[str, dict[str, str]]]) -> dict[str, str]:
    """Each key's stored id, after checking every producer got that same id and one of them sent it."""
    stored: dict[str, str] = {}
    for n in range(KEYS):
        key = f"key-{n}"
        got = {outcome["ids"][key] for outcome in outcomes}
        assert len(got) == 1, f"producers got different ids for {key}: {got}"
        (stored[key],) = got
        assert stored[key] in {outcome["sent"][key] for outcome in outcomes}
    return stored


async def test_producer_processes_racing_on_a_window_store_one_row_per_key(race_file: str, db_path: Path) -> None:
    outcomes = _race("window", race_file, PRODUCERS, KEYS)
    stored = _one_id_per_key(outcomes)
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute("SELECT id, json_extract(args, '$.key') FROM soniq_jobs").fetchall()
        windows = dict(conn.execute("SELECT key, job_id FROM soniq_unique_windows").fetchall())
    assert len(rows) == KEYS, f"{len(rows)} rows for {KEYS} keys"
    assert {key: job_id for job_id, key in rows} == stored
    assert windows == stored


async def test_producer_processes_racing_on_a_debounce_leave_one_queued_row_per_key(
    race_file: str, db_path: Path
) -> None:
    outcomes = _race("debounce", race_file, PRODUCERS, KEYS)
    stored = _one_id_per_key(outcomes)
    with sqlite3.connect(db_path) as conn:
        rows: list[tuple[Any, ...]] = conn.execute(
            "SELECT id, dedup_key, status, args, scheduled_at, debounce_deadline FROM soniq_jobs"
        ).fetchall()
    assert len(rows) == KEYS, f"{len(rows)} rows for {KEYS} keys"
    producers = {f"p{n}" for n in range(PRODUCERS)}
    for job_id, key, status, args, scheduled_at, deadline in rows:
        assert (status, stored[key]) == ("queued", job_id)
        decoded = json.loads(args)
        assert decoded["key"] == key
        assert decoded["producer"] in producers
        assert scheduled_at <= deadline


# -- the upgrade from version 8 ------------------------------------------------------


def _file_at_version_8(path: Path) -> None:
    """A file as soniq-sqlite left it at schema version 8: a keyed queued row, running and done rows, a dead letter."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        for step in range(1, 9):
            for statement in MIGRATIONS[step]:
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 8")
        conn.executemany(
            "INSERT INTO soniq_jobs (id, job_name, args, status, max_attempts, queue, priority, scheduled_at, "
            "created_at, updated_at, worker_id, dedup_key, progress) "
            "VALUES (?, 'app.job', ?, ?, 3, 'default', 100, 0, ?, 0, ?, ?, ?)",
            [
                ("queued", '{"n": 0}', "queued", 1, None, "old-key", None),
                ("running", "{}", "processing", 2, "w0", None, '{"done": 1}'),
                ("done", "{}", "done", 3, None, None, None),
            ],
        )
        conn.execute(
            "INSERT INTO soniq_dead_letter_jobs (id, job_name, args, queue, attempts, max_attempts, priority, "
            "last_error, dead_letter_reason, moved_to_dead_letter_at) "
            "VALUES ('dead', 'app.job', '{}', 'default', 3, 3, 100, 'boom', 'max_retries', 5)"
        )


async def test_a_populated_version_8_file_upgrades_and_its_keyed_rows_are_not_debounced(db_path: Path) -> None:
    _file_at_version_8(db_path)
    backend = SQLiteBackend.from_url(f"sqlite:///{db_path}")
    try:
        status = await backend.schema_status()
        assert [(step.version, step.name) for step in status.pending] == [(9, "unique windows and debounced jobs")]
        before = await _row(backend, "queued")
        assert (before.args, before.dedup_key) == ({"n": 0}, "old-key")
        assert (await _row(backend, "running")).progress == {"done": 1}

        # The old keyed row was stored without a deadline: a debounced repeat leaves it alone.
        now = datetime.now(UTC)
        repeat = _job(dedup_key="old-key", args={"n": 1}, scheduled_at=now, debounce_deadline=now + timedelta(hours=1))
        assert await _enqueue(backend, repeat) == ["queued"]
        assert await _row(backend, "queued") == before

        # Both features work on the upgraded file.
        window = _job(unique_window=_window("w", now))
        assert await _enqueue(backend, window) == [window.id]
        assert await _enqueue(backend, _job(unique_window=_window("w", now))) == [window.id]
        first = _job(dedup_key="new-key", args={"n": 1}, scheduled_at=now, debounce_deadline=now + timedelta(hours=1))
        second = _job(dedup_key="new-key", args={"n": 2}, scheduled_at=now, debounce_deadline=now + timedelta(hours=1))
        assert await _enqueue(backend, first) == [first.id]
        assert await _enqueue(backend, second) == [first.id]
        assert (await _row(backend, first.id)).args == {"n": 2}
        assert await backend.prune_jobs(PruneJobsParams(limit=10)) == 0
    finally:
        await backend.close()

    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 9
        job_columns = {row[1] for row in conn.execute("PRAGMA table_info(soniq_jobs)")}
        indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        old = conn.execute("SELECT id, debounce_deadline FROM soniq_jobs WHERE id IN ('queued', 'running', 'done')")
        assert sorted(old.fetchall()) == [("done", None), ("queued", None), ("running", None)]
        assert conn.execute("SELECT count(*) FROM soniq_dead_letter_jobs").fetchone()[0] == 1
    assert "debounce_deadline" in job_columns
    assert "soniq_unique_windows_expires" in indexes
