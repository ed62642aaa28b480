"""Schema version 7 on SQLite: stored queue pauses, job steps and checkpoints, row versions and
shutdown nacks, and the upgrade of a populated version-6 file."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from soniq.backend import (
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    EnqueueJobsParams,
    GetDeadLetterParams,
    GetJobParams,
    GroupLimit,
    JobResult,
    LimitScope,
    NackJobParams,
    PauseQueueParams,
    RegisterWorkerParams,
    ReplayDeadLetterParams,
    RequestCancelParams,
    Rescue,
    RescueAction,
    RescueJobsParams,
    ResumeQueueParams,
    RetryJobParams,
    SaveCheckpointParams,
    SaveStepParams,
    SnoozeJobParams,
    WorkerInfo,
)
from soniq.records import JobRecord, JobStatus, NewJob
from soniq_sqlite import SQLiteBackend
from soniq_sqlite.schema import MIGRATIONS, SCHEMA_VERSION

JobFactory = Callable[..., NewJob]

pytestmark = pytest.mark.asyncio


def _claim(worker: str = "w", **extra: object) -> ClaimJobsParams:
    options: dict[str, object] = {"queues": None, "limit": 100, "mark_started": True, **extra}
    return ClaimJobsParams(worker_id=worker, **options)  # type: ignore[arg-type]


async def _get(backend: SQLiteBackend, job_id: str) -> JobRecord:
    row = await backend.get_job(GetJobParams(job_id=job_id))
    assert row is not None
    return row


# -- the upgrade from version 6 -------------------------------------------------


def _file_at_version_6(path: Path) -> None:
    """A file as soniq-sqlite left it at schema version 6, with rows of every kind in it."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        for step in range(1, 7):
            for statement in MIGRATIONS[step]:
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 6")
        conn.executemany(
            "INSERT INTO soniq_jobs (id, job_name, args, status, max_attempts, queue, priority, scheduled_at, "
            "created_at, updated_at, worker_id) VALUES (?, 'app.job', '{\"n\": 1}', ?, 3, 'default', 100, 0, ?, 0, ?)",
            [
                ("q1", "queued", 1, None),
                ("q2", "queued", 2, None),
                ("done", "done", 3, None),
                ("run", "processing", 4, "w0"),
            ],
        )
        conn.execute(
            "INSERT INTO soniq_dead_letter_jobs (id, job_name, args, queue, attempts, max_attempts, priority, "
            "last_error, dead_letter_reason, moved_to_dead_letter_at) "
            "VALUES ('dead', 'app.job', '{}', 'default', 3, 3, 100, 'boom', 'max_retries', 5)"
        )
        conn.execute(
            "INSERT INTO soniq_workers (id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at, "
            "job_names) VALUES ('w0', 'h', 1, NULL, 1, 'active', 0, 0, '[\"app.job\"]')"
        )


async def test_a_populated_version_6_file_upgrades_in_place_and_its_rows_work(db_path: Path) -> None:
    _file_at_version_6(db_path)
    backend = SQLiteBackend.from_url(f"sqlite:///{db_path}")
    try:
        status = await backend.schema_status()
        assert [step.version for step in status.pending] == list(range(7, SCHEMA_VERSION + 1))
        assert "queue pauses" in status.pending[0].name

        for job_id in ("q1", "q2", "done", "run"):
            row = await _get(backend, job_id)
            assert (row.version, row.steps, row.checkpoint, row.shutdown_nacks) == (1, {}, None, 0)
        assert (await backend.schema_status()).up_to_date
        assert await backend.paused_queues() == []
        (old_worker,) = await backend.list_workers()
        assert (old_worker.job_names, old_worker.job_versions) == (("app.job",), None)
        dead = await backend.get_dead_letter(GetDeadLetterParams(job_id="dead"))
        assert dead is not None
        assert dead.last_error == "boom"

        # The old rows are claimed (by a worker that runs version 1), step, and complete.
        claimed = await backend.claim_jobs(_claim(job_names=["app.job"], max_versions={"app.job": 1}))
        assert [row.id for row in claimed] == ["q1", "q2"]
        assert all(row.args == {"n": 1} and row.version == 1 and row.steps == {} for row in claimed)
        assert await backend.save_step(SaveStepParams("q1", "w", "fetch", '{"ok": true}'))
        assert await backend.nack_job(NackJobParams(job_id="q1", worker_id="w", handler_started=True))
        (again,) = await backend.claim_jobs(_claim())
        assert (again.id, again.steps, again.shutdown_nacks) == ("q1", {"fetch": {"ok": True}}, 1)
        results = [JobResult("q1", "one"), JobResult("q2", "two")]
        assert await backend.complete_jobs(CompleteJobsParams(worker_id="w", results=results)) == {"q1", "q2"}
        assert (await _get(backend, "q1")).status is JobStatus.DONE

        # The old dead-letter row replays as a version 1 row.
        replayed = await backend.replay_dead_letter(
            ReplayDeadLetterParams(job_id="dead", new_job_id="dead-again", scheduled_at=datetime.now(UTC))
        )
        assert replayed == "dead-again"
        assert (await _get(backend, "dead-again")).version == 1
    finally:
        await backend.close()

    with sqlite3.connect(db_path, isolation_level=None) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        # A writer that names only the old columns (soniq-django's insert) still gets a working row.
        conn.execute(
            "INSERT INTO soniq_jobs (id, job_name, args, status, attempts, max_attempts, queue, priority, "
            "scheduled_at, created_at, updated_at) "
            "VALUES ('dj', 'app.job', '{}', 'queued', 0, 3, 'default', 100, 0, 9, 9)"
        )
        assert conn.execute(
            "SELECT version, steps, checkpoint, shutdown_nacks FROM soniq_jobs WHERE id = 'dj'"
        ).fetchone() == (
            1,
            "{}",
            None,
            0,
        )


# -- queue pauses ---------------------------------------------------------------


async def test_pauses_are_stored_once_and_listed_by_name(backend: SQLiteBackend) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    assert await backend.pause_queue(PauseQueueParams("mail", reason="deploy"))
    first = (await backend.paused_queues())[0]
    assert await backend.pause_queue(PauseQueueParams("billing"))
    assert not await backend.pause_queue(PauseQueueParams("mail", reason="still deploying"))
    listed = await backend.paused_queues()
    assert [(p.queue, p.reason) for p in listed] == [("billing", None), ("mail", "still deploying")]
    assert listed[1].paused_at == first.paused_at
    assert listed[1].paused_at > before

    # Two processes' worth of concurrent pauses leave exactly one row and one True.
    other = SQLiteBackend(backend.location.target)
    try:
        outcomes = await asyncio.gather(
            *(b.pause_queue(PauseQueueParams("race")) for b in (backend, other, backend, other))
        )
    finally:
        await other.close()
    assert sorted(outcomes) == [False, False, False, True]
    assert await backend.resume_queue(ResumeQueueParams("mail"))
    assert not await backend.resume_queue(ResumeQueueParams("mail"))
    assert [p.queue for p in await backend.paused_queues()] == ["billing", "race"]


@pytest.mark.parametrize("limited", [False, True], ids=["plain", "limited"])
async def test_a_claim_leaves_the_rows_of_excluded_queues_untouched(
    backend: SQLiteBackend, raw: sqlite3.Connection, make_job: JobFactory, limited: bool
) -> None:
    jobs = [make_job(queue=queue) for queue in ("a", "b", "c", "a")]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    before = dict(raw.execute("SELECT id, updated_at FROM soniq_jobs WHERE queue = 'a'").fetchall())
    limits = [GroupLimit(LimitScope.QUEUE, "b", max_concurrent=5)] if limited else []

    # Every queue but the paused one; a queue list loses it; a list of only paused queues claims nothing.
    assert await backend.claim_jobs(_claim(queues=["a"], excluded_queues=["a"], limits=limits)) == []
    served = await backend.claim_jobs(_claim(queues=["a", "b"], excluded_queues=["a"], limits=limits, limit=1))
    assert [row.queue for row in served] == ["b"]
    rest = await backend.claim_jobs(_claim(excluded_queues=["a"], limits=limits))
    assert [row.queue for row in rest] == ["c"]
    assert (
        dict(raw.execute("SELECT id, updated_at FROM soniq_jobs WHERE queue = 'a' AND status = 'queued'").fetchall())
        == before
    )
    assert len(await backend.claim_jobs(_claim(limits=limits))) == 2


# -- versions -------------------------------------------------------------------


@pytest.mark.parametrize("limited", [False, True], ids=["plain", "limited"])
async def test_a_claim_never_takes_or_touches_a_row_newer_than_the_workers_code(
    backend: SQLiteBackend, raw: sqlite3.Connection, make_job: JobFactory, limited: bool
) -> None:
    def job(name: str, version: int) -> NewJob:
        return replace(make_job(), job_name=name, version=version)

    rows = [job("a", 1), job("a", 2), job("a", 3), job("b", 1), job("b", 2), job("other", 9)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=rows))
    assert [(await _get(backend, r.id)).version for r in rows] == [1, 2, 3, 1, 2, 9]
    ids = {(r.job_name, r.version): r.id for r in rows}
    untouched = dict(raw.execute("SELECT id, updated_at FROM soniq_jobs").fetchall())
    limits = [GroupLimit(LimitScope.JOB, "a", max_concurrent=50)] if limited else []

    # All values equal, every claimed name a key: one comparison.
    same = await backend.claim_jobs(_claim(job_names=["a", "b"], max_versions={"a": 1, "b": 1}, limits=limits))
    assert {row.id for row in same} == {ids["a", 1], ids["b", 1]}
    # Equal values, a name that is not a key ("other") runs at any version.
    equal = await backend.claim_jobs(_claim(max_versions={"a": 1, "b": 1}, limits=limits, worker="w2"))
    assert {row.id for row in equal} == {ids["other", 9]}
    # Distinct values.
    distinct = await backend.claim_jobs(_claim(max_versions={"a": 2, "b": 5}, limits=limits, worker="w3"))
    assert {(row.job_name, row.version) for row in distinct} == {("a", 2), ("b", 2)}
    left = raw.execute("SELECT id, status, worker_id, updated_at FROM soniq_jobs WHERE status = 'queued'").fetchall()
    assert [(r[0], r[1], r[2]) for r in left] == [(ids["a", 3], "queued", None)]
    assert left[0][3] == untouched[ids["a", 3]]
    # Without max_versions (a backend user that sends none), any version is claimed.
    assert [row.version for row in await backend.claim_jobs(_claim(limits=limits))] == [3]


async def test_the_common_claim_compares_one_number_and_keeps_its_index(
    backend: SQLiteBackend, raw: sqlite3.Connection, make_job: JobFactory
) -> None:
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[make_job() for _ in range(3)]))
    statements: list[str] = []
    conn = backend._db._conn  # the test reads what the backend sent
    assert conn is not None
    await conn.set_trace_callback(statements.append)
    try:
        claimed = await backend.claim_jobs(
            _claim(queues=["default"], job_names=["tests.noop"], max_versions={"tests.noop": 1}, excluded_queues=["x"])
        )
    finally:
        await conn.set_trace_callback(None)
    assert len(claimed) == 3
    claims = [s for s in statements if s.lstrip().startswith("UPDATE soniq_jobs SET status = 'processing'")]
    assert claims
    assert all(s == claims[0] for s in claims), "the claim is one statement"
    assert len(set(statements)) == 1
    sql = claims[0]
    assert sql.count("version <=") == 1
    assert "CASE WHEN job_name" not in sql
    assert "'x'" not in sql
    plan = [str(row[3]) for row in raw.execute(f"EXPLAIN QUERY PLAN {sql}")]
    assert any("soniq_jobs_claimable_by_queue" in line for line in plan), plan


async def test_workers_report_their_job_versions(backend: SQLiteBackend) -> None:
    info = WorkerInfo(
        id="w", hostname="h", pid=1, queues=None, concurrency=2, job_names=("a", "b"), job_versions={"a": 3, "b": 1}
    )
    await backend.register_worker(RegisterWorkerParams(worker=info))
    await backend.register_worker(RegisterWorkerParams(worker=replace(info, id="plain", job_versions=None)))
    by_id = {w.id: w for w in await backend.list_workers()}
    assert by_id["w"].job_versions == {"a": 3, "b": 1}
    assert by_id["plain"].job_versions is None


async def test_a_dead_lettered_row_replays_at_its_version_without_its_steps(
    backend: SQLiteBackend, make_job: JobFactory
) -> None:
    job = replace(make_job(), version=4)
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    await backend.claim_jobs(_claim())
    assert await backend.save_step(SaveStepParams(job.id, "w", "one", "1"))
    assert await backend.save_checkpoint(SaveCheckpointParams(job.id, "w", '"half"'))
    assert await backend.dead_letter_job(
        DeadLetterJobParams(job_id=job.id, worker_id="w", error="no way", reason="no_upgrade_path")
    )
    dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=job.id))
    assert dead is not None
    assert dead.dead_letter_reason == "no_upgrade_path"
    new_id = await backend.replay_dead_letter(
        ReplayDeadLetterParams(job_id=job.id, new_job_id="again", scheduled_at=datetime.now(UTC))
    )
    assert new_id == "again"
    row = await _get(backend, "again")
    assert (row.version, row.steps, row.checkpoint, row.shutdown_nacks) == (4, {}, None, 0)


# -- steps, checkpoints, shutdown nacks ----------------------------------------


async def test_steps_set_one_key_at_a_time_and_are_fenced(backend: SQLiteBackend, make_job: JobFactory) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    assert (await _get(backend, job.id)).steps == {}
    assert not await backend.save_step(SaveStepParams(job.id, "w", "early", "1")), "a queued row is not owned"
    await backend.claim_jobs(_claim())
    assert not await backend.save_step(SaveStepParams(job.id, "intruder", "x", "1"))
    assert not await backend.save_step(SaveStepParams("missing", "w", "x", "1"))

    names = ["plain", "a.b", "[0]", 'quote"d', "back\\slash", "tab\there", "é", ""]
    for index, name in enumerate(names):
        assert await backend.save_step(SaveStepParams(job.id, "w", name, json.dumps({"i": index, "deep": {"x": 1}})))
    # Replacing a key replaces its value whole (no merge), and null is a value.
    assert await backend.save_step(SaveStepParams(job.id, "w", "plain", '{"only": true}'))
    assert await backend.save_step(SaveStepParams(job.id, "w", "nothing", "null"))
    steps = (await _get(backend, job.id)).steps
    assert steps["plain"] == {"only": True}
    assert steps["nothing"] is None
    assert {name: steps[name] for name in names[1:]} == {
        name: {"i": index, "deep": {"x": 1}} for index, name in enumerate(names) if index
    }
    assert len(steps) == len(names) + 1

    assert not await backend.save_checkpoint(SaveCheckpointParams(job.id, "intruder", "1"))
    assert await backend.save_checkpoint(SaveCheckpointParams(job.id, "w", '{"page": 3}'))
    assert await backend.save_checkpoint(SaveCheckpointParams(job.id, "w", '[1, "two"]'))
    assert (await _get(backend, job.id)).checkpoint == [1, "two"]


async def test_steps_and_checkpoints_survive_every_hand_back(backend: SQLiteBackend, make_job: JobFactory) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    expected_steps: dict[str, object] = {}
    last: list[str | None] = [None]

    async def run(worker: str, step: str) -> JobRecord:
        (row,) = await backend.claim_jobs(_claim(worker))
        assert (row.steps, row.checkpoint) == (expected_steps, last[0])
        assert await backend.save_step(SaveStepParams(job.id, worker, step, json.dumps(step)))
        assert await backend.save_checkpoint(SaveCheckpointParams(job.id, worker, json.dumps(step)))
        expected_steps[step] = step
        last[0] = step
        return row

    await run("w1", "s1")
    assert await backend.nack_job(NackJobParams(job_id=job.id, worker_id="w1"))
    await run("w2", "s2")
    past = datetime.now(UTC) - timedelta(seconds=1)
    assert await backend.retry_job(RetryJobParams(job_id=job.id, worker_id="w2", error="e", scheduled_at=past))
    await run("w3", "s3")
    assert await backend.snooze_job(SnoozeJobParams(job_id=job.id, worker_id="w3", scheduled_at=past))
    row = await run("w4", "s4")
    assert (await backend.request_cancel(RequestCancelParams(job_id=job.id))).value == "requested"
    current = await _get(backend, job.id)
    rescue = Rescue(job.id, "w4", current.updated_at, RescueAction.REQUEUE, attempts=row.attempts + 1, error="lost")
    assert await backend.rescue_jobs(RescueJobsParams(rescues=[rescue])) == {job.id}
    final = await _get(backend, job.id)
    assert final.steps == {"s1": "s1", "s2": "s2", "s3": "s3", "s4": "s4"}
    assert final.checkpoint == "s4"
    assert final.cancel_requested


async def test_only_a_nack_after_the_handler_started_counts(backend: SQLiteBackend, make_job: JobFactory) -> None:
    job = make_job()
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    for handler_started, expected in ((True, 1), (False, 1), (True, 2)):
        (row,) = await backend.claim_jobs(_claim())
        assert row.shutdown_nacks == expected - (1 if handler_started else 0)
        assert await backend.nack_job(NackJobParams(job_id=job.id, worker_id="w", handler_started=handler_started))
        assert (await _get(backend, job.id)).shutdown_nacks == expected
    # A nack the worker lost the row for writes nothing.
    assert not await backend.nack_job(NackJobParams(job_id=job.id, worker_id="w", handler_started=True))
    past = datetime.now(UTC) - timedelta(seconds=1)
    await backend.claim_jobs(_claim())
    assert await backend.retry_job(RetryJobParams(job_id=job.id, worker_id="w", error="e", scheduled_at=past))
    assert (await _get(backend, job.id)).shutdown_nacks == 2
