"""Dependencies, limits, cancel requests and job changes on SQLite: what the contract suite cannot see from outside.

Schema version 6 on an existing file, the query plans that keep the unlimited claim as cheap
as before (blocked rows are not in the claim indexes), limits held by the file's one writer
across real OS processes, the rate table keeping one window per group, and a cascade deeper
than any trigger recursion SQLite allows.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from soniq.params import (
    CancelJobParams,
    ClaimJobsParams,
    CompleteJobsParams,
    EnqueueJobsParams,
    GetJobParams,
    GroupLimit,
    JobResult,
    LimitScope,
    QueueStatsParams,
)
from soniq.records import DependencyPolicy, JobStatus, NewJob
from soniq_sqlite import SQLiteBackend
from soniq_sqlite.schema import MIGRATIONS, SCHEMA_VERSION

JobFactory = Callable[..., NewJob]

pytestmark = pytest.mark.asyncio


def _file_at_version_5(path: Path) -> None:
    with sqlite3.connect(path, isolation_level=None) as conn:
        for step in range(1, 6):
            for statement in MIGRATIONS[step]:
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 5")
        conn.execute(
            "INSERT INTO soniq_jobs (id, job_name, status, max_attempts, queue, priority, scheduled_at, "
            "created_at, updated_at) VALUES ('old-queued', 'tests.noop', 'queued', 3, 'default', 100, 0, 0, 0), "
            "('old-done', 'tests.noop', 'done', 3, 'default', 100, 0, 0, 0)"
        )


def _names(path: Path, kind: str) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,))}


async def test_a_version_5_file_gets_step_6_and_its_rows_stay_claimable(db_path: Path, make_job: JobFactory) -> None:
    _file_at_version_5(db_path)
    backend = SQLiteBackend.from_url(f"sqlite:///{db_path}")
    try:
        status = await backend.schema_status()
        assert [step.version for step in status.pending] == list(range(6, SCHEMA_VERSION + 1))
        assert "soniq_jobs_claim_by_queue" in _names(db_path, "index"), "schema_status must not upgrade"

        old = await backend.get_job(GetJobParams(job_id="old-queued"))
        assert old is not None
        assert (old.depends_on, old.waiting_on, old.dependency_policy) == ((), 0, DependencyPolicy.CANCEL)
        assert (old.limit_key, old.cancel_requested) == (None, False)
        # The old queued row is in the new claim index, and can be depended on.
        child = replace(make_job(), depends_on=("old-queued",))
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[child]))
        claimed = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=10, mark_started=True))
        assert [row.id for row in claimed] == ["old-queued"]
        assert await backend.complete_jobs(CompleteJobsParams(worker_id="w", results=[JobResult("old-queued", 1)]))
        again = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=10, mark_started=True))
        assert [row.id for row in again] == [child.id]
        assert (await backend.schema_status()).up_to_date
    finally:
        await backend.close()

    indexes = _names(db_path, "index")
    assert {"soniq_jobs_claimable_by_queue", "soniq_jobs_claimable_any_queue", "soniq_jobs_running_groups"} <= indexes
    assert not indexes & {"soniq_jobs_claim_by_queue", "soniq_jobs_claim_any_queue"}
    assert {"soniq_job_dependencies", "soniq_rate_windows"} <= _names(db_path, "table")
    assert _names(db_path, "trigger") == {"soniq_jobs_resolve_dependents"}
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def _plan(raw: sqlite3.Connection, statement: str) -> list[str]:
    return [str(row[3]) for row in raw.execute(f"EXPLAIN QUERY PLAN {statement}")]


async def _traced(backend: SQLiteBackend, run: Callable[[], object]) -> list[str]:
    """The statements the backend's connection ran during `run`, with their values filled in."""
    statements: list[str] = []
    conn = backend._db._conn  # the test reads what the backend sent
    assert conn is not None
    await conn.set_trace_callback(statements.append)
    try:
        result = run()
        if asyncio.iscoroutine(result):
            await result
    finally:
        await conn.set_trace_callback(None)
    return statements


async def test_the_claims_read_only_claimable_rows_through_their_indexes(
    backend: SQLiteBackend, raw: sqlite3.Connection, make_job: JobFactory
) -> None:
    dep = make_job()
    blocked = [replace(make_job(priority=1), depends_on=(dep.id,)) for _ in range(50)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[dep, *blocked]))
    in_index = raw.execute(
        "SELECT count(*) FROM soniq_jobs INDEXED BY soniq_jobs_claimable_any_queue "
        "WHERE status = 'queued' AND waiting_on = 0"
    ).fetchone()[0]
    assert in_index == 1, "blocked rows must not be in the claim index"

    for queues, index in ((["default"], "soniq_jobs_claimable_by_queue"), (None, "soniq_jobs_claimable_any_queue")):
        params = ClaimJobsParams(worker_id="w", queues=queues, limit=5, mark_started=True)
        statements = await _traced(backend, lambda p=params: backend.claim_jobs(p))
        claims = [s for s in statements if s.lstrip().startswith("UPDATE soniq_jobs SET status = 'processing'")]
        claim = claims[0]  # a statement SQLite re-prepared is traced twice
        plan = _plan(raw, claim)
        assert any(index in line for line in plan), plan
        assert not any(line.startswith("SCAN soniq_jobs") and "INDEX" not in line for line in plan), plan
        raw.execute("UPDATE soniq_jobs SET status = 'queued', worker_id = NULL WHERE id = ?", (dep.id,))

    limits = [GroupLimit(LimitScope.JOB, "tests.noop", max_concurrent=3)]
    params = ClaimJobsParams(worker_id="w", queues=["default"], limit=5, mark_started=True, limits=limits)
    statements = await _traced(backend, lambda: backend.claim_jobs(params))
    counting = next(s for s in statements if "count(*)" in s)
    assert any("soniq_jobs_running_groups" in line for line in _plan(raw, counting))
    page = next(s for s in statements if s.lstrip().startswith("SELECT id, queue, job_name"))
    assert any("soniq_jobs_claimable_by_queue" in line for line in _plan(raw, page))

    # A completion probes the edge table by its primary key, once per row.
    done = CompleteJobsParams(worker_id="w", results=[JobResult(dep.id, None)])
    statements = await _traced(backend, lambda: backend.complete_jobs(done))
    complete = next(s for s in statements if "SET status = 'done'" in s)
    assert any("soniq_job_dependencies USING PRIMARY KEY" in line for line in _plan(raw, complete))
    assert raw.execute("SELECT count(*) FROM soniq_jobs WHERE waiting_on = 0 AND status = 'queued'").fetchone()[0] == 50


async def test_a_rate_group_keeps_only_its_current_window(
    backend: SQLiteBackend, raw: sqlite3.Connection, make_job: JobFactory
) -> None:
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job() for _ in range(10)]))
    limits = [GroupLimit(LimitScope.QUEUE, "default", rate_limit=2, rate_period=0.5)]
    params = ClaimJobsParams(worker_id="w", queues=None, limit=10, mark_started=True, limits=limits)
    for _ in range(3):
        # Start just after a window opens (local clock = the store's clock here).
        await asyncio.sleep(0.5 - time.time() % 0.5 + 0.05)
        assert len(await backend.claim_jobs(params)) == 2
        assert await backend.claim_jobs(params) == []
        windows = raw.execute("SELECT group_key, window_start, claims FROM soniq_rate_windows").fetchall()
        assert len(windows) == 1, windows
        assert windows[0][2] == 2


async def test_a_chain_of_1000_enqueued_in_one_call_is_cancelled_whole(
    backend: SQLiteBackend, make_job: JobFactory
) -> None:
    """Deeper than SQLite's trigger recursion limit (1000): the cascade is a loop, not triggers."""
    chain: list[NewJob] = []
    for _ in range(1001):
        chain.append(replace(make_job(), depends_on=(chain[-1].id,) if chain else ()))
    started = time.monotonic()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=chain))
    assert time.monotonic() - started < 10
    assert await backend.cancel_job(CancelJobParams(job_id=chain[0].id))
    last = await backend.get_job(GetJobParams(job_id=chain[-1].id))
    assert last is not None
    assert (last.status, last.last_error) == (JobStatus.CANCELLED, f"dependency {chain[-2].id} was cancelled")
    stats = await backend.queue_stats(QueueStatsParams())
    assert stats.cancelled == 1001
