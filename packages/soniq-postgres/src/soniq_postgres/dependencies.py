"""Job dependencies on PostgreSQL: enqueue with `depends_on`, and resolution.

An edge row ``(dependency_id, job_id)`` in `soniq_job_dependencies` stands for each
dependency a queued row still waits for, and the dependency's row carries
``has_dependents = true``. Every terminal write returns `has_dependents` of the
rows it wrote (see `queries.finished`); only when one is set does the writer
resolve, consuming that row's edges in the same transaction, so rows nobody
depends on pay nothing.

Why the flag, and why resolution is a second statement: under READ COMMITTED a
statement reads other rows as of its start. The enqueue sets the flag with an
UPDATE of the dependency's row, so it and a terminal write of that row are
serialised on the row lock: either the enqueue waits, and then reads the
dependency's final status (PostgreSQL re-reads a row it waited for), or the
terminal write waits, and then sees the flag on the row it writes, and its next
statement, in the same transaction, sees the committed edges.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import asyncpg

from soniq.backend import DependencyPolicy, NewJob, rules
from soniq.backend.rules import DependencyState
from soniq.errors import UnknownDependencyError
from soniq_postgres.queries import DEBOUNCE_MOVE, Queries
from soniq_postgres.rows import debounce_deadlines, job_arrays, window_arrays

CANCELLED = DependencyState.CANCELLED.value
DEAD_LETTERED = DependencyState.DEAD_LETTERED.value
DELETED = DependencyState.DELETED.value
"""How a failed dependency ended (`rules.DependencyState`); None stands for done."""


class DependencySql:
    """SQL text for one schema."""

    def __init__(self, q: Queries) -> None:
        jobs, dead = q.jobs, q.dead
        edges = f"{q.jobs.rsplit('.', 1)[0]}.soniq_job_dependencies"
        self.edges = edges
        # Marks the dependencies (waiting for a terminal write in progress) and reads each one's status.
        # The rows are locked in id order, so two enqueues that share dependencies never deadlock.
        self.flag = f"""
UPDATE {jobs} SET has_dependents = true
WHERE id IN (SELECT id FROM {jobs} WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE)
RETURNING id, status"""
        self.dead_ids = f"SELECT id FROM {dead} WHERE id = ANY($1::text[])"
        # Unique windows are taken before anything else, so a job whose window is held is known
        # (and left out) before the call is planned. $1 ids, $2 keys, $3 starts, $4 ends.
        self.take_windows = q.take_windows
        # $1..$10 as enqueue_keyed, $11 status, $12 waiting_on, $13 last_error, $14 depends_on (JSON),
        # $15 policy, $16 limit_key, $17 has_dependents, $18 edge dependencies, $19 edge dependents,
        # $20 wake channel, $21 payload, $22 versions, $23 debounce deadlines. Edges are stored only
        # for rows this call inserted. A debounced job moves a debounced holder as in enqueue_keyed.
        self.insert = f"""
WITH stored AS (
    INSERT INTO {jobs} AS j (id, job_name, args, queue, priority, scheduled_at, max_attempts, trace_context,
                        dedup_key, producer_id, status, waiting_on, last_error, depends_on, dependency_policy,
                        limit_key, has_dependents, version, debounce_deadline, attempts, created_at, updated_at)
    SELECT i, n, a::json, q, p, s, m, t::json, k, pr, st, w, e,
           ARRAY(SELECT json_array_elements_text(d::json)), po, lk, hd, v, dd, 0, clock_timestamp(),
           clock_timestamp()
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::timestamptz[], $7::int[],
                $8::text[], $9::text[], $10::text[], $11::text[], $12::int[], $13::text[], $14::text[],
                $15::text[], $16::text[], $17::bool[], $22::int[], $23::timestamptz[])
         AS r(i, n, a, q, p, s, m, t, k, pr, st, w, e, d, po, lk, hd, v, dd)
    ON CONFLICT (dedup_key) WHERE status = 'queued' AND dedup_key IS NOT NULL
    {DEBOUNCE_MOVE}
    RETURNING id, dedup_key
), linked AS (
    INSERT INTO {edges} (dependency_id, job_id)
    SELECT x.d, x.j FROM unnest($18::text[], $19::text[]) AS x(d, j)
    WHERE x.j IN (SELECT id FROM stored)
    ON CONFLICT DO NOTHING
)
SELECT id, dedup_key, pg_notify($20, $21) FROM stored"""
        # One round of resolution, applying `rules.on_dependency_finished` in one statement.
        # $1 settled ids, $2 for each the `last_error` a dependent it cancels gets (NULL: it is
        # done, which cancels nobody), $3 wake channel, $4 changes channel, $5 the policies under
        # which this round's failures cancel a dependent. Both $2 and $5 come from core's rule; the
        # statement only reads the dependents and writes. Consumes the edges of the settled rows;
        # each dependent still waiting either counts them down or becomes `cancelled` (the failed
        # dependency with the smallest id names the error). Returns the dependents cancelled here
        # that have dependents of their own (the next round).
        self.resolve = f"""
WITH x AS (
    SELECT * FROM unnest($1::text[], $2::text[]) AS x(id, error)
), e AS (
    DELETE FROM {edges} AS e USING x WHERE e.dependency_id = x.id
    RETURNING e.job_id, e.dependency_id, x.error
), a AS (
    SELECT job_id, count(*)::int AS n,
           (array_agg(error ORDER BY dependency_id) FILTER (WHERE error IS NOT NULL))[1] AS error
    FROM e GROUP BY job_id
), u AS (
    UPDATE {jobs} AS j SET
        status = CASE WHEN a.error IS NOT NULL AND j.dependency_policy = ANY($5::text[])
                      THEN 'cancelled' ELSE 'queued' END,
        waiting_on = CASE WHEN a.error IS NOT NULL AND j.dependency_policy = ANY($5::text[])
                          THEN 0 ELSE GREATEST(j.waiting_on - a.n, 0) END,
        last_error = CASE WHEN a.error IS NOT NULL AND j.dependency_policy = ANY($5::text[])
                          THEN a.error ELSE j.last_error END,
        updated_at = now()
    FROM a
    WHERE j.id = a.job_id AND j.status = 'queued' AND j.waiting_on > 0
    RETURNING j.id, j.status, j.waiting_on, j.queue, j.has_dependents, j.watched
)
SELECT (SELECT count(pg_notify($3::text, queue)) FROM u WHERE status = 'queued' AND waiting_on = 0)
       + (SELECT count(pg_notify($4::text, id)) FROM u WHERE status = 'cancelled' AND watched) AS notified,
       ARRAY(SELECT id FROM u WHERE status = 'cancelled' AND has_dependents) AS next"""


async def resolve(
    connection: asyncpg.Connection,
    sql: DependencySql,
    settled: Sequence[tuple[str, str | None]],
    *,
    wake_channel: str,
    changes_channel: str,
) -> None:
    """Resolve the dependents of `settled` rows ((id, how it failed, or None when done)),
    cascading `cancel` through dependents of dependents. Run inside the terminal write's transaction.

    One statement per round and per way of ending (a round is normally all one way)."""
    pending = list(settled)
    while pending:
        following: list[tuple[str, str | None]] = []
        for ended in dict.fromkeys(how for _, how in pending):
            ids = [job_id for job_id, how in pending if how == ended]
            state = DependencyState.DONE if ended is None else DependencyState(ended)
            errors = [rules.dependency_failed_error(job_id, state) if state.failed else None for job_id in ids]
            cancelling = [policy.value for policy in rules.policies_cancelled_by(state)]
            row = await connection.fetchrow(sql.resolve, ids, errors, wake_channel, changes_channel, cancelling)
            assert row is not None
            following.extend((job_id, CANCELLED) for job_id in row["next"])
        pending = following


async def settle(
    connection: asyncpg.Connection,
    sql: DependencySql,
    statement: str,
    *args: object,
    ended: str | None,
    wake_channel: str,
    changes_channel: str,
) -> list[str]:
    """Run one terminal write (a statement returning `queries.finished`) in a transaction with the
    resolution of its rows' dependents; returns the ids written. A deadlock is retried (see `retrying`)."""

    async def attempt() -> list[str]:
        async with connection.transaction():
            rows = await connection.fetch(statement, *args)
            flagged = [(row["id"], ended) for row in rows if row["has_dependents"]]
            if flagged:
                await resolve(connection, sql, flagged, wake_channel=wake_channel, changes_channel=changes_channel)
        return [row["id"] for row in rows]

    return await retrying(attempt)


_T = TypeVar("_T")
RETRIED_FAILURES = (asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError)
RETRY_ATTEMPTS = 10


async def retrying(attempt: Callable[[], Awaitable[_T]]) -> _T:
    """Run a transaction (or savepoint) again when PostgreSQL chose it as a deadlock's or a
    serialization failure's victim: it was rolled back whole, so running it again is safe.

    An enqueue with dependencies locks the dependencies' rows while a completion in another
    process locks a parent and then its dependents; whatever order the enqueue takes, a chain
    of dependencies can meet that order reversed. The loser is retried after a short random
    pause, up to `RETRY_ATTEMPTS` times, and only then raises.
    """
    for tries_left in range(RETRY_ATTEMPTS - 1, -1, -1):
        try:
            return await attempt()
        except RETRIED_FAILURES:
            if tries_left == 0:
                raise
            await asyncio.sleep(random.uniform(0.001, 0.02) * (RETRY_ATTEMPTS - tries_left))
    raise AssertionError("unreachable")


async def insert_with_dependencies(
    connection: asyncpg.Connection, sql: DependencySql, jobs: Sequence[NewJob], *, wake_channel: str, payload: str
) -> list[str]:
    """Insert `jobs` (some with `depends_on`) as `Backend.enqueue_jobs` says; returns the stored ids.

    Runs in a transaction of its own, or a savepoint inside the caller's: an unknown
    dependency raises `UnknownDependencyError` with nothing of the call stored. A deadlock with
    a terminal write resolving the same rows is retried (see `retrying`), never raised to the producer.
    """
    return await retrying(lambda: _insert_with_dependencies(connection, sql, jobs, wake_channel, payload))


async def _insert_with_dependencies(
    connection: asyncpg.Connection, sql: DependencySql, jobs: Sequence[NewJob], wake_channel: str, payload: str
) -> list[str]:
    async with connection.transaction():
        # A job whose unique window another job holds is not inserted: its id stands for the
        # holder's, also as a dependency of a later job of the call.
        held: dict[str, str] = {}
        if any(job.unique_window is not None for job in jobs):
            for row in await connection.fetch(sql.take_windows, [job.id for job in jobs], *window_arrays(jobs)):
                held[row["key"]] = str(row["job_id"])
        aliases = {
            job.id: held[job.unique_window.key]
            for job in jobs
            if job.unique_window is not None and held[job.unique_window.key] != job.id
        }
        stored = [job for job in jobs if job.id not in aliases]
        position = {job.id: index for index, job in enumerate(stored)}
        # Each id to read, in order, with the id the job gave (for the error): a call naming
        # thousands of ids stays linear.
        wanted: dict[str, str] = {}
        for index, job in enumerate(stored):
            for given in job.depends_on:
                dep = aliases.get(given, given)
                if position.get(dep, index) >= index:
                    wanted.setdefault(dep, given)
        external = list(wanted)
        ended: dict[str, DependencyState] = {}
        if external:
            for row in await connection.fetch(sql.flag, external):
                ended[row["id"]] = rules.state_of_row(row["status"])
            rest = [dep for dep in external if dep not in ended]
            if rest:
                dead = {row["id"] for row in await connection.fetch(sql.dead_ids, rest)}
                missing = [wanted[dep] for dep in rest if dep not in dead]
                if missing:
                    raise UnknownDependencyError(missing)
                ended.update(dict.fromkeys(dead, DependencyState.DEAD_LETTERED))
        plans: list[rules.InsertPlan] = []
        edges: list[tuple[str, str]] = []
        for index, job in enumerate(stored):
            resolved = [aliases.get(dep, dep) for dep in job.depends_on]
            plan = rules.plan_insert(job.dependency_policy, [(dep, ended[dep]) for dep in resolved])
            plans.append(plan)
            edges.extend((dep, job.id) for dep in plan.pending)
            # A later job of the call reads this one as it is stored.
            if position.get(job.id) == index:
                ended[job.id] = DependencyState.CANCELLED if plan.cancelled else DependencyState.PENDING
        depended = {dep for dep, _ in edges}
        rows = await connection.fetch(
            sql.insert,
            *job_arrays(stored),
            [job.dedup_key for job in stored],
            [job.producer_id for job in stored],
            [plan.status.value for plan in plans],
            [plan.waiting_on for plan in plans],
            [plan.last_error for plan in plans],
            [json.dumps(list(job.depends_on)) for job in stored],
            [DependencyPolicy(job.dependency_policy).value for job in stored],
            [job.limit_key for job in stored],
            [job.id in depended for job in stored],
            [dep for dep, _ in edges],
            [job_id for _, job_id in edges],
            wake_channel,
            payload,
            [job.version for job in stored],
            debounce_deadlines(stored),
        )
    by_key = {row["dedup_key"]: str(row["id"]) for row in rows if row["dedup_key"] is not None}
    return [
        aliases.get(job.id) or (by_key.get(job.dedup_key, job.id) if job.dedup_key is not None else job.id)
        for job in jobs
    ]
