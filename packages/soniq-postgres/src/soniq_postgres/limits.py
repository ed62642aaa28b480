"""The limited claim: fleet-wide `max_concurrent` and `rate_limit` inside the claim.

Only claims with `ClaimJobsParams.limits` come here; the unlimited claim is the one
statement in `queries.Queries.claim` and counts nothing. A limited claim is one
transaction that first takes ``pg_advisory_xact_lock`` on the namespace's key, so
limited claims run one at a time fleet-wide (each statement after the lock reads
what the previous holder committed), then:

1. counts the `processing` rows of the limited queues and job names from the rows
   themselves (partial indexes on ``status = 'processing'``), per queue, job name and
   `limit_key`, and reads the current rate windows, deleting past ones, in one statement;
   which group each count belongs to is core's `soniq.backend.rules.group_of`;
2. reads candidate rows in claim order with ``FOR UPDATE SKIP LOCKED``, leaving
   out in SQL the groups that are already full, and picks in Python the rows that
   keep every group within its limits (a row held back is passed over; rows of
   other groups behind it are still taken);
3. claims the picked rows and adds them to their rate windows, in one statement
   (the picked rows are locked by the transaction, so each of them is claimed).

Everything is transaction-scoped (the lock too), so it works through PgBouncer
in transaction mode. Windows are fixed, ``rate_period`` seconds long, aligned to
the Unix epoch on the server's clock: the statement that takes the lock reads the
transaction's ``now()``, and core's `soniq.backend.rules.window_start` turns it into
each limit's window start, passed to the statements as a parameter.

What SQL still decides about groups: `LimitSql.candidates` leaves out, as a pre-filter,
the rows of groups already full (by queue or job name, and `limit_key` for a partitioned
limit). Every row it returns is checked again with `rules.group_of` before it is taken.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from soniq.backend import ClaimJobsParams, GroupLimit, JobRecord, LimitScope, rules
from soniq.backend.rules import LimitGroup
from soniq_postgres.migrations import LIMITS_LOCK
from soniq_postgres.queries import JOB_COLUMNS, Queries, version_bound, version_filter
from soniq_postgres.rows import job_record

MAX_ROUNDS = 4
"""Candidate reads per claim; each round leaves out the groups the previous one filled."""

WHOLE = "*"
"""The partition text of a limit that is not partitioned."""
NO_KEY = "-"
"""The partition of rows whose `limit_key` is None."""


def partition_sql(row: str = "") -> str:
    """SQL for a row's partition text under a partitioned limit (a None key is its own partition)."""
    return f"CASE WHEN {row}limit_key IS NULL THEN '{NO_KEY}' ELSE 'k:' || {row}limit_key END"


def partition_of(limit_key: str | None) -> str:
    return NO_KEY if limit_key is None else f"k:{limit_key}"


def partition_text(group: LimitGroup) -> str:
    """How a group (`rules.group_of`) is stored and filtered: `WHOLE`, or its partition text."""
    return partition_of(group.limit_key) if group.partitioned else WHOLE


def window_name(limit: GroupLimit) -> str:
    """The rate window's name: the limit and its period (windows of two periods never mix)."""
    return f"{limit.key}@{float(limit.rate_period)!r}"


class LimitSql:
    """SQL text for one schema."""

    def __init__(self, q: Queries) -> None:
        schema = q.jobs.rsplit(".", 1)[0]
        windows = f"{schema}.soniq_rate_windows"
        # Limited claims run one at a time; the transaction's clock, read here, dates the claim.
        self.lock = "SELECT pg_advisory_xact_lock($1, hashtext($2)) AS locked, now() AS now"
        # What each group holds, in one read: the running rows of the limited queues ($1) and job
        # names ($2) per queue, job name and limit_key, and the claims of each rate limit in its
        # current window ($3 window names, $4 window starts, $5 limit index). Past windows go.
        self.groups = f"""
WITH w AS (
    SELECT * FROM unnest($3::text[], $4::timestamptz[], $5::int[]) AS w(name, start, i)
), past AS (
    DELETE FROM {windows} AS r USING w WHERE r.limit_name = w.name AND r.window_start < w.start
)
SELECT 'queue' AS kind, queue, job_name, limit_key, NULL::int AS i, NULL::text AS partition, count(*)::int AS n
FROM {q.jobs} WHERE status = 'processing' AND queue = ANY($1::text[])
GROUP BY queue, job_name, limit_key
UNION ALL
SELECT 'job', queue, job_name, limit_key, NULL, NULL, count(*)::int
FROM {q.jobs} WHERE status = 'processing' AND job_name = ANY($2::text[])
GROUP BY queue, job_name, limit_key
UNION ALL
SELECT 'rate', NULL, NULL, NULL, w.i, r.partition, r.starts FROM {windows} AS r JOIN w
ON r.limit_name = w.name AND r.window_start = w.start"""
        # $1 worker, $2 ids, $3 mark_started; $4 window names, $5 window starts, $6 partitions, $7 claims
        # to add. The picked rows are locked by this transaction, so every one of them is claimed.
        self.take = f"""
WITH bumped AS (
    INSERT INTO {windows} AS r (limit_name, partition, window_start, starts)
    SELECT name, part, start, n
    FROM unnest($4::text[], $5::timestamptz[], $6::text[], $7::int[]) AS b(name, start, part, n)
    ON CONFLICT (limit_name, partition, window_start) DO UPDATE SET starts = r.starts + EXCLUDED.starts
)
UPDATE {q.jobs} AS j
SET status = 'processing', worker_id = $1, updated_at = now(),
    started_at = CASE WHEN $3::bool THEN now() END, dedup_key = NULL
WHERE j.id = ANY($2::text[]) AND j.status = 'queued'
RETURNING {", ".join("j." + c.strip() for c in JOB_COLUMNS.split(","))}"""
        self._jobs = q.jobs

    def candidates(self, *, by_queue: bool, by_name: bool, excluded: bool = False, versions: str | None = None) -> str:
        """Due claimable rows in claim order, locked, outside the full groups.

        $1 how many, $2 ids already picked, $3 full queues, $4 full job names,
        $5 full (queue, partition) texts, $6 full (job name, partition) texts,
        then, from $7 on and each only when asked for: the queues, the job names, the
        excluded (paused) queues, and the version bound (`queries.version_filter`).
        """
        part = partition_sql()
        filters = [
            "queue <> ALL($3::text[])",
            "job_name <> ALL($4::text[])",
            f"(queue || chr(31) || {part}) <> ALL($5::text[])",
            f"(job_name || chr(31) || {part}) <> ALL($6::text[])",
            "id <> ALL($2::text[])",
        ]
        position = 7
        if by_queue:
            filters.append(f"queue = ANY(${position}::text[])")
            position += 1
        if by_name:
            filters.append(f"array_position(${position}::text[], job_name) IS NOT NULL")
            position += 1
        if excluded:
            filters.append(f"queue <> ALL(${position}::text[])")
            position += 1
        if versions is not None:
            filters.append(version_filter(versions, position).removeprefix("AND "))
        return f"""
SELECT id, queue, job_name, limit_key FROM {self._jobs}
WHERE status = 'queued' AND waiting_on = 0 AND scheduled_at <= now() AND {" AND ".join(filters)}
ORDER BY priority, scheduled_at, created_at, id
LIMIT $1
FOR UPDATE SKIP LOCKED"""


@dataclass(slots=True)
class _Group:
    """One group of one limit: its room left for this claim."""

    running: int = 0
    started: int = 0


def _full(limit: GroupLimit, group: _Group) -> bool:
    if limit.max_concurrent is not None and group.running >= limit.max_concurrent:
        return True
    return limit.rate_limit is not None and group.started >= limit.rate_limit


async def claim_limited(
    connection: asyncpg.Connection, sql: LimitSql, schema: str, params: ClaimJobsParams
) -> list[JobRecord]:
    """Claim up to `params.limit` rows within `params.limits` (see the module docstring)."""
    limits: Sequence[GroupLimit] = list(params.limits)
    queues = None if params.queues is None else list(params.queues)
    names = None if params.job_names is None else list(params.job_names)
    async with connection.transaction():
        locked = await connection.fetchrow(sql.lock, LIMITS_LOCK, schema)
        assert locked is not None
        now = locked["now"]
        groups: dict[tuple[int, str], _Group] = {}
        concurrent = [(i, limit) for i, limit in enumerate(limits) if limit.max_concurrent is not None]
        by_scope = {
            scope: [(i, limit) for i, limit in concurrent if limit.scope is scope]
            for scope in (LimitScope.QUEUE, LimitScope.JOB)
        }
        rated = [(i, limit) for i, limit in enumerate(limits) if limit.rate_limit is not None]
        for row in await connection.fetch(
            sql.groups,
            sorted({limit.name for _, limit in by_scope[LimitScope.QUEUE]}),
            sorted({limit.name for _, limit in by_scope[LimitScope.JOB]}),
            [window_name(limit) for _, limit in rated],
            [rules.window_start(now, limit.rate_period) for _, limit in rated],
            [i for i, _ in rated],
        ):
            if row["kind"] == "rate":
                groups.setdefault((row["i"], row["partition"]), _Group()).started = row["n"]
                continue
            # The running rows of one queue, job name and limit_key: in the group core's rule says.
            for i, limit in by_scope[LimitScope(row["kind"])]:
                of = rules.group_of(limit, queue=row["queue"], job_name=row["job_name"], limit_key=row["limit_key"])
                if of is not None:
                    groups.setdefault((i, partition_text(of)), _Group()).running += row["n"]

        picked: list[str] = []
        bumps: dict[tuple[int, str], int] = {}
        # Paused queues: a named claim arrives without them (the caller dropped them).
        excluded = list(params.excluded_queues) if queues is None else []
        versions, bound = version_bound(params.max_versions, names)
        statement = sql.candidates(
            by_queue=queues is not None, by_name=names is not None, excluded=bool(excluded), versions=versions
        )
        filters: list[Any] = [arg for arg in (queues, names) if arg is not None]
        if excluded:
            filters.append(excluded)
        filters.extend(bound)
        for _ in range(MAX_ROUNDS):
            need = params.limit - len(picked)
            if need <= 0:
                break
            batch = max(2 * need, need + 16)
            full = _full_groups(limits, groups)
            rows = await connection.fetch(statement, batch, picked, *full, *filters)
            for row in rows:
                if len(picked) >= params.limit:
                    break
                mine = _groups_of(limits, row["queue"], row["job_name"], row["limit_key"])
                if any(_full(limits[i], groups.setdefault((i, part), _Group())) for i, part in mine):
                    continue
                for i, part in mine:
                    group = groups[(i, part)]
                    group.running += 1
                    group.started += 1
                    if limits[i].rate_limit is not None:
                        bumps[(i, part)] = bumps.get((i, part), 0) + 1
                picked.append(row["id"])
            if len(rows) < batch:
                break
        if not picked:
            return []
        claimed = await connection.fetch(
            sql.take,
            params.worker_id,
            picked,
            params.mark_started,
            [window_name(limits[i]) for i, _ in bumps],
            [rules.window_start(now, limits[i].rate_period) for i, _ in bumps],
            [part for _, part in bumps],
            list(bumps.values()),
        )
    return [job_record(row) for row in claimed]


def _groups_of(limits: Sequence[GroupLimit], queue: str, job_name: str, limit_key: str | None) -> list[tuple[int, str]]:
    """The row's group under each limit that matches it (`rules.group_of`), as (limit index, partition text)."""
    found = []
    for i, limit in enumerate(limits):
        group = rules.group_of(limit, queue=queue, job_name=job_name, limit_key=limit_key)
        if group is not None:
            found.append((i, partition_text(group)))
    return found


def _full_groups(
    limits: Sequence[GroupLimit], groups: dict[tuple[int, str], _Group]
) -> tuple[list[str], list[str], list[str], list[str]]:
    """The groups with no room left, as the four exclusion arrays of `LimitSql.candidates`."""
    queues: list[str] = []
    names: list[str] = []
    queue_parts: list[str] = []
    name_parts: list[str] = []
    for (i, part), group in groups.items():
        limit = limits[i]
        if not _full(limit, group):
            continue
        by_queue = limit.scope is LimitScope.QUEUE
        if part == WHOLE:
            (queues if by_queue else names).append(limit.name)
        else:
            (queue_parts if by_queue else name_parts).append(f"{limit.name}\x1f{part}")
    return queues, names, queue_parts, name_parts
