"""Job dependencies on SQLite: inserting dependents and failing them.

Each function takes the sqlite3 connection inside the caller's ``BEGIN IMMEDIATE``
(`Database.transaction_raw`, or `connection.run_raw` from an async transaction body) and
runs whole on aiosqlite's thread. SQLite has one writer, so what these functions read
cannot change before they write.

Resolution by `done` is not here: the trigger ``soniq_jobs_resolve_dependents`` (schema
version 6) does it in the statement that writes `done`. Failure cascades (a cancelled
dependent fails its own dependents), so it is a loop here, level by level, through the edge
table ``soniq_job_dependencies``: a failed row that nobody waits for costs one primary-key probe.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from soniq.backend import DependencyPolicy, JobStatus, NewJob, rules
from soniq.backend.rules import DependencyState
from soniq.errors import UnknownDependencyError
from soniq_sqlite import keyed

CANCELLED = DependencyState.CANCELLED.value
DEAD_LETTERED = DependencyState.DEAD_LETTERED.value
DELETED = DependencyState.DELETED.value
"""How a dependency failed (`rules.DependencyState`); the dependent's ``last_error`` is
`rules.dependency_failed_error` of it."""

INSERT_ANY_JOB = (
    "INSERT INTO soniq_jobs (id, job_name, args, status, attempts, max_attempts, queue, priority, "
    "scheduled_at, created_at, updated_at, trace_context, limit_key, dedup_key, producer_id, "
    "depends_on, waiting_on, dependency_policy, last_error, version) "
    "VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (dedup_key) WHERE status = 'queued' AND dedup_key IS NOT NULL "
    "DO UPDATE SET dedup_key = excluded.dedup_key RETURNING id"
)
"""Every column a new row can carry; a key a queued row holds returns that row's id instead."""

_CHUNK = 500
"""Ids bound per statement (SQLite allows 32766 variables; this keeps statements short)."""


@dataclass(slots=True)
class Fallout:
    """What failing (or inserting) rows did to others: for wake-ups after the commit."""

    cancelled: list[str] = field(default_factory=list)
    """Dependents cancelled by the cascade, in the order they were cancelled."""
    released: bool = False
    """Some dependent's ``waiting_on`` reached 0: it is claimable now."""


def fail_dependents(
    raw: sqlite3.Connection, failed: Iterable[tuple[str, str]], now: int, fallout: Fallout | None = None
) -> Fallout:
    """Fail the dependents of each ``(row id, how)``, recursively.

    Each dependent is written as `rules.on_dependency_finished` says: still queued and waiting,
    it counts down (policy `run`) or becomes `cancelled` with ``waiting_on = 0`` and
    `rules.dependency_failed_error` (policy `cancel`), failing its own dependents in turn. The
    failed rows' edges are deleted as they are read, so a later resolution finds nothing.
    """
    fallout = Fallout() if fallout is None else fallout
    frontier = list(failed)
    while frontier:
        following: list[tuple[str, str]] = []
        for start in range(0, len(frontier), _CHUNK):
            chunk = frontier[start : start + _CHUNK]
            how_of = dict(chunk)
            marks = ", ".join("?" for _ in chunk)
            edges = raw.execute(
                f"DELETE FROM soniq_job_dependencies WHERE dependency_id IN ({marks}) RETURNING dependency_id, job_id",
                [row_id for row_id, _ in chunk],
            ).fetchall()
            for dependency_id, job_id in sorted(edges, key=lambda edge: (str(edge[1]), str(edge[0]))):
                if _fail_one(raw, str(job_id), str(dependency_id), how_of[str(dependency_id)], now, fallout):
                    following.append((str(job_id), CANCELLED))
        frontier = following
    return fallout


def _fail_one(raw: sqlite3.Connection, job_id: str, dependency_id: str, how: str, now: int, fallout: Fallout) -> bool:
    """Apply one failed dependency to one dependent, as `rules.on_dependency_finished` says; True
    when it was cancelled. The read and the write are one step: this transaction is the only writer."""
    row = raw.execute("SELECT status, waiting_on, dependency_policy FROM soniq_jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        return False
    update = rules.on_dependency_finished(str(row[2]), how, dependency_id, status=str(row[0]), waiting_on=int(row[1]))
    if update.action is rules.DependentAction.COUNT_DOWN:
        raw.execute("UPDATE soniq_jobs SET waiting_on = ? WHERE id = ?", (update.waiting_on, job_id))
        fallout.released = fallout.released or update.released
        return False
    if update.action is rules.DependentAction.CANCEL:
        raw.execute(
            "UPDATE soniq_jobs SET status = 'cancelled', waiting_on = ?, last_error = ?, updated_at = ?, "
            "dedup_key = NULL WHERE id = ?",
            (update.waiting_on, update.last_error, now, job_id),
        )
        fallout.cancelled.append(job_id)
        return True
    return False


def _state(found: str) -> DependencyState:
    """What `_states` read, as a dependency state."""
    return DependencyState.DEAD_LETTERED if found == "dead" else rules.state_of_row(found)


def _states(raw: sqlite3.Connection, ids: Sequence[str]) -> dict[str, str]:
    """Each id's state as a dependency: its status, ``dead`` for a dead letter; unknown ids absent."""
    marks = ", ".join("?" for _ in ids)
    found = {
        str(row[0]): str(row[1]) for row in raw.execute(f"SELECT id, status FROM soniq_jobs WHERE id IN ({marks})", ids)
    }
    rest = [job_id for job_id in ids if job_id not in found]
    if rest:
        marks = ", ".join("?" for _ in rest)
        for row in raw.execute(f"SELECT id FROM soniq_dead_letter_jobs WHERE id IN ({marks})", rest):
            found[str(row[0])] = "dead"
    return found


def insert_with_dependencies(
    raw: sqlite3.Connection, rows: Sequence[tuple[Any, ...]], jobs: Sequence[NewJob], depends_on_json: Sequence[str]
) -> tuple[list[str], set[str]]:
    """Insert `jobs` in order, each reading its dependencies as they stand (earlier jobs of the
    call included, since they are inserted first); the stored ids, and the queues given a row
    that is claimable now. Raises `UnknownDependencyError` listing every unknown id, after
    which the caller's transaction rolls back and nothing of the call is stored.

    `rows` are `backend._job_rows` tuples: id, job_name, args, max_attempts, queue, priority,
    scheduled_at, created_at, updated_at, trace_context, limit_key, version.
    """
    stored_as: dict[str, str] = {}
    missing: list[str] = []
    missing_set: set[str] = set()  # set lookups: a call naming thousands of ids stays linear
    stored: list[str] = []
    due: set[str] = set()
    for row, job, depends_json in zip(rows, jobs, depends_on_json, strict=True):
        if job.unique_window is not None or job.debounce_deadline is not None:
            # Never sent with depends_on: a window or a debounce of the call is a keyed insert.
            stored_id, is_due = keyed.insert_one(raw, row, job)
            stored_as[str(row[0])] = stored_id
            stored.append(stored_id)
            if is_due:
                due.add(str(row[4]))
            continue
        wanted = list(dict.fromkeys(job.depends_on))
        # A dependency on a deduplicated job of this call is a dependency on the row that holds its key.
        targets = [stored_as.get(dep, dep) for dep in wanted]
        states = _states(raw, targets) if targets else {}
        unknown = [dep for dep, target in zip(wanted, targets, strict=True) if target not in states]
        if unknown:
            missing.extend(dep for dep in unknown if dep not in missing_set)
            missing_set.update(unknown)
            continue
        policy = DependencyPolicy(job.dependency_policy)
        plan = rules.plan_insert(policy, [(target, _state(states[target])) for target in targets])
        pending = list(plan.pending)
        status, waiting_on, last_error = JobStatus(plan.status).value, plan.waiting_on, plan.last_error
        job_id, scheduled_at, created_at = row[0], row[6], row[7]
        dedup_key = job.dedup_key if status == "queued" else None
        values = (*row[:3], status, *row[3:11], dedup_key, job.producer_id, depends_json, waiting_on, policy.value)
        returned = raw.execute(INSERT_ANY_JOB, (*values, last_error, row[11])).fetchall()
        stored_id = str(returned[0][0])
        stored_as[str(job_id)] = stored_id
        stored.append(stored_id)
        if stored_id != job_id or status != "queued":
            continue
        if pending:
            raw.executemany(
                "INSERT OR IGNORE INTO soniq_job_dependencies (dependency_id, job_id) VALUES (?, ?)",
                [(target, job_id) for target in pending],
            )
        elif scheduled_at <= created_at:
            due.add(str(row[4]))
    if missing:
        raise UnknownDependencyError(missing)
    return stored, due
