"""Versioned schema migrations, applied under a transaction-scoped advisory lock.

Each migration runs once per namespace (schema) and is recorded in
`soniq_migrations`. Several hosts running `soniq setup` at the same moment
serialise on `pg_advisory_xact_lock`, so exactly one applies each version and
the others find it recorded. Migrations are append-only: never edit a
released one, add the next number instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from soniq_postgres.options import quote_ident

# Advisory lock class ids (first key); the second key is hashtext(schema).
MIGRATION_LOCK = 0x50C1_0001
RECOVERY_LOCK = 0x50C1_0002
LIMITS_LOCK = 0x50C1_0003
"""Serialises the claims that pass fleet-wide limits, per namespace."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str
    """Uses `{schema}` for the quoted schema name."""


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "initial",
        """
-- JSON columns are `json`, not `jsonb`: jsonb cannot hold the NUL character
-- (U+0000), which job arguments may contain, and Soniq never queries inside them.
CREATE TABLE {schema}.soniq_jobs (
    id            text        PRIMARY KEY,
    job_name      text        NOT NULL,
    args          json        NOT NULL DEFAULT '{{}}',
    status        text        NOT NULL DEFAULT 'queued'
                  CONSTRAINT soniq_jobs_status_check
                  CHECK (status IN ('queued', 'processing', 'done', 'cancelled')),
    attempts      integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts  integer     NOT NULL DEFAULT 1 CHECK (max_attempts >= 1),
    queue         text        NOT NULL DEFAULT 'default',
    priority      integer     NOT NULL DEFAULT 100,
    scheduled_at  timestamptz NOT NULL DEFAULT now(),
    last_error    text,
    worker_id     text,
    result        json,
    trace_context json,
    started_at    timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- The claim path: an ordered scan of only the queued rows, for one queue ...
CREATE INDEX soniq_jobs_claim_queue_idx
    ON {schema}.soniq_jobs (queue, priority, scheduled_at, created_at, id)
    WHERE status = 'queued';
-- ... and across every queue, so neither needs a sort of the backlog.
CREATE INDEX soniq_jobs_claim_any_idx
    ON {schema}.soniq_jobs (priority, scheduled_at, created_at, id)
    WHERE status = 'queued';
-- Stale recovery looks up the rows held by dead workers.
CREATE INDEX soniq_jobs_processing_idx
    ON {schema}.soniq_jobs (worker_id)
    WHERE status = 'processing';
CREATE INDEX soniq_jobs_created_idx ON {schema}.soniq_jobs (created_at DESC, id DESC);
CREATE INDEX soniq_jobs_queue_status_idx ON {schema}.soniq_jobs (queue, status);

CREATE TABLE {schema}.soniq_dead_letter_jobs (
    id                      text        PRIMARY KEY,
    job_name                text        NOT NULL,
    args                    json        NOT NULL DEFAULT '{{}}',
    queue                   text        NOT NULL,
    attempts                integer     NOT NULL DEFAULT 0,
    max_attempts            integer     NOT NULL DEFAULT 1,
    priority                integer     NOT NULL DEFAULT 100,
    last_error              text,
    dead_letter_reason      text        NOT NULL,
    moved_to_dead_letter_at timestamptz NOT NULL DEFAULT now(),
    resurrection_count      integer     NOT NULL DEFAULT 0,
    last_resurrection_at    timestamptz
);
CREATE INDEX soniq_dead_letter_moved_idx
    ON {schema}.soniq_dead_letter_jobs (moved_to_dead_letter_at DESC, id DESC);

CREATE TABLE {schema}.soniq_workers (
    id             text        PRIMARY KEY,
    hostname       text        NOT NULL,
    pid            integer     NOT NULL,
    queues         text[],
    concurrency    integer     NOT NULL,
    status         text        NOT NULL DEFAULT 'active'
                   CONSTRAINT soniq_workers_status_check
                   CHECK (status IN ('active', 'stopping', 'stopped')),
    last_heartbeat timestamptz NOT NULL DEFAULT now(),
    started_at     timestamptz NOT NULL DEFAULT now()
);
""",
    ),
    Migration(
        2,
        "worker_job_names",
        """
-- The job names each worker registered, as JSON text (NULL for a worker that
-- did not report them, and for every row written before this step).
ALTER TABLE {schema}.soniq_workers ADD COLUMN IF NOT EXISTS job_names text;
""",
    ),
    Migration(
        3,
        "dashboard reads and worker state",
        """
ALTER TABLE {schema}.soniq_workers
    ADD COLUMN IF NOT EXISTS state            text,
    ADD COLUMN IF NOT EXISTS state_changed_at timestamptz,
    ADD COLUMN IF NOT EXISTS last_shutdown    json;
-- job_activity: only recent done rows, by the time they finished.
CREATE INDEX IF NOT EXISTS soniq_jobs_done_at_idx
    ON {schema}.soniq_jobs (updated_at, queue) WHERE status = 'done';
-- job_page with an exact job_name: the keyset order within one name.
CREATE INDEX IF NOT EXISTS soniq_jobs_name_created_idx
    ON {schema}.soniq_jobs (job_name, created_at DESC, id DESC);
-- dead_letter_page by queue, and queue_names' loose index scan over dead letters.
CREATE INDEX IF NOT EXISTS soniq_dead_letter_queue_idx
    ON {schema}.soniq_dead_letter_jobs (queue, moved_to_dead_letter_at DESC, id DESC);
""",
    ),
    Migration(
        4,
        "schedules, leader lease and pruning",
        """
-- Recurring jobs: core computes next_run; fire_schedule advances it and enqueues
-- in one transaction, fenced on the next_run it read (exactly once per due time).
CREATE TABLE IF NOT EXISTS {schema}.soniq_schedules (
    name           text             PRIMARY KEY,
    job_name       text             NOT NULL,
    queue          text             NOT NULL DEFAULT 'default',
    priority       integer          NOT NULL DEFAULT 100,
    max_attempts   integer          NOT NULL DEFAULT 1 CHECK (max_attempts >= 1),
    args           json             NOT NULL DEFAULT '{{}}',
    cron           text,
    every_seconds  double precision,
    timezone       text             NOT NULL DEFAULT 'UTC',
    catch_up       text             NOT NULL DEFAULT 'skip',
    catch_up_limit integer          NOT NULL DEFAULT 1,
    paused         boolean          NOT NULL DEFAULT false,
    next_run       timestamptz      NOT NULL,
    last_run       timestamptz,
    run_count      bigint           NOT NULL DEFAULT 0,
    last_job_id    text,
    created_at     timestamptz      NOT NULL DEFAULT now(),
    updated_at     timestamptz      NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS soniq_schedules_due_idx
    ON {schema}.soniq_schedules (next_run) WHERE NOT paused;
-- Named leases (the fleet's leader is 'leader'), judged on this server's clock.
CREATE TABLE IF NOT EXISTS {schema}.soniq_leader (
    name        text        PRIMARY KEY,
    holder      text        NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
-- Finished rows past their result_ttl; the partial index keeps pruning to the rows it may delete.
ALTER TABLE {schema}.soniq_jobs ADD COLUMN IF NOT EXISTS expires_at timestamptz;
CREATE INDEX IF NOT EXISTS soniq_jobs_expires_idx
    ON {schema}.soniq_jobs (expires_at) WHERE expires_at IS NOT NULL;
""",
    ),
    Migration(
        5,
        "deduplicated enqueue and producer id",
        """
ALTER TABLE {schema}.soniq_jobs
    ADD COLUMN IF NOT EXISTS dedup_key   text,
    ADD COLUMN IF NOT EXISTS producer_id text;
-- At most one queued row per key; enqueue's INSERT ... ON CONFLICT targets exactly this index.
CREATE UNIQUE INDEX IF NOT EXISTS soniq_jobs_dedup_idx
    ON {schema}.soniq_jobs (dedup_key) WHERE status = 'queued' AND dedup_key IS NOT NULL;
""",
    ),
    # -- dependencies, limits, cancel requests and job changes --------------------
    Migration(
        6,
        "dependencies, fleet-wide limits, cancel requests and watched jobs",
        """
-- Constant defaults: PostgreSQL 11+ adds these without rewriting the table. The checks are
-- NOT VALID so that an upgrade does not scan every row (each existing row holds the default);
-- they still hold every row written from now on.
ALTER TABLE {schema}.soniq_jobs
    ADD COLUMN IF NOT EXISTS depends_on        text[]  NOT NULL DEFAULT '{{}}',
    ADD COLUMN IF NOT EXISTS waiting_on        integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS dependency_policy text    NOT NULL DEFAULT 'cancel',
    ADD COLUMN IF NOT EXISTS limit_key         text,
    ADD COLUMN IF NOT EXISTS cancel_requested  boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS watched           boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS has_dependents    boolean NOT NULL DEFAULT false;
ALTER TABLE {schema}.soniq_jobs
    ADD CONSTRAINT soniq_jobs_dependency_policy_check CHECK (dependency_policy IN ('cancel', 'run')) NOT VALID,
    ADD CONSTRAINT soniq_jobs_waiting_on_check CHECK (waiting_on >= 0) NOT VALID;
-- The claim indexes hold only claimable rows: a row waiting for dependencies is not in them,
-- so the claim still reads the first rows of the index in order and never steps over blocked ones.
DROP INDEX IF EXISTS {schema}.soniq_jobs_claim_queue_idx;
CREATE INDEX soniq_jobs_claim_queue_idx
    ON {schema}.soniq_jobs (queue, priority, scheduled_at, created_at, id)
    WHERE status = 'queued' AND waiting_on = 0;
DROP INDEX IF EXISTS {schema}.soniq_jobs_claim_any_idx;
CREATE INDEX soniq_jobs_claim_any_idx
    ON {schema}.soniq_jobs (priority, scheduled_at, created_at, id)
    WHERE status = 'queued' AND waiting_on = 0;
-- A limited claim counts the running rows of a group (a queue or a job name, per limit_key).
CREATE INDEX IF NOT EXISTS soniq_jobs_running_queue_idx
    ON {schema}.soniq_jobs (queue, limit_key) WHERE status = 'processing';
CREATE INDEX IF NOT EXISTS soniq_jobs_running_name_idx
    ON {schema}.soniq_jobs (job_name, limit_key) WHERE status = 'processing';
-- One edge per unresolved dependency: resolving a job reads only its own dependents.
-- No foreign keys: a dependency may be deleted or moved to the dead letters, and
-- the write that does so consumes its edges.
CREATE TABLE IF NOT EXISTS {schema}.soniq_job_dependencies (
    dependency_id text NOT NULL,
    job_id        text NOT NULL,
    PRIMARY KEY (dependency_id, job_id)
);
-- Claims per group and fixed window of a rate limit; limited claims delete past windows.
CREATE TABLE IF NOT EXISTS {schema}.soniq_rate_windows (
    limit_name   text        NOT NULL,
    partition    text        NOT NULL,
    window_start timestamptz NOT NULL,
    starts       integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (limit_name, partition, window_start)
);
""",
    ),
    # -- a claim index of queued rows only ----------------------------------------
    Migration(
        7,
        "queued rows only in the claim indexes",
        """
-- The (queue, status) index leaves out queued rows. A claim (status = 'queued') can then use
-- only the claim indexes, whose order is its ORDER BY: on a table not yet analyzed, the planner
-- took (queue, status) for a one-queue claim and sorted the whole backlog (145 ms a claim at
-- 100,000 queued). An enqueue also writes one index entry less. Counts and queue names read
-- queued rows from the claim indexes, and rows waiting for dependencies from the index below.
DROP INDEX IF EXISTS {schema}.soniq_jobs_queue_status_idx;
CREATE INDEX soniq_jobs_queue_status_idx
    ON {schema}.soniq_jobs (queue, status) WHERE status <> 'queued';
CREATE INDEX IF NOT EXISTS soniq_jobs_waiting_idx
    ON {schema}.soniq_jobs (queue) WHERE status = 'queued' AND waiting_on > 0;
""",
    ),
    # -- queue pauses, steps and checkpoints, job versions, shutdown nacks ---------
    Migration(
        8,
        "queue pauses, job steps, job versions and shutdown nacks",
        """
-- Constant defaults again: no table rewrite, and every existing row reads as enqueued
-- before these existed (version 1, no steps, never cut off by a shutdown).
ALTER TABLE {schema}.soniq_jobs
    ADD COLUMN IF NOT EXISTS shutdown_nacks integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS version        integer NOT NULL DEFAULT 1,
    ADD COLUMN IF NOT EXISTS steps          json    NOT NULL DEFAULT '{{}}',
    ADD COLUMN IF NOT EXISTS checkpoint     json;
ALTER TABLE {schema}.soniq_jobs
    ADD CONSTRAINT soniq_jobs_version_check CHECK (version >= 1) NOT VALID;
-- A replayed dead letter keeps the version its arguments were written for.
ALTER TABLE {schema}.soniq_dead_letter_jobs
    ADD COLUMN IF NOT EXISTS version integer NOT NULL DEFAULT 1;
-- The version of each job a worker runs, as JSON text (NULL: not reported).
ALTER TABLE {schema}.soniq_workers ADD COLUMN IF NOT EXISTS job_versions text;
-- Paused queues: claims leave their rows alone until the pause is removed.
CREATE TABLE IF NOT EXISTS {schema}.soniq_paused_queues (
    queue     text        PRIMARY KEY,
    reason    text,
    paused_at timestamptz NOT NULL DEFAULT now()
);
""",
    ),
    # -- job progress and job logs -------------------------------------------------
    Migration(
        9,
        "job progress and job logs",
        """
-- Nullable columns without defaults: added in place, and every existing row reads as having
-- no progress and no logs. A dead-lettered row keeps its logs, never its progress.
ALTER TABLE {schema}.soniq_jobs
    ADD COLUMN IF NOT EXISTS progress json,
    ADD COLUMN IF NOT EXISTS logs     text;
ALTER TABLE {schema}.soniq_dead_letter_jobs ADD COLUMN IF NOT EXISTS logs text;
""",
    ),
    # -- unique windows and debounced jobs -----------------------------------------
    Migration(
        10,
        "unique windows and debounced jobs",
        """
-- The latest scheduled_at a debounced row may be moved to; NULL (every existing row) is not debounced.
-- Nullable without a default: added in place.
ALTER TABLE {schema}.soniq_jobs ADD COLUMN IF NOT EXISTS debounce_deadline timestamptz;
-- One row per key a window holds: the job that took it and the window's bounds, from the producer's
-- clock. Enqueue takes a key with INSERT ... ON CONFLICT on the primary key; a row is replaced only
-- once its window has ended, and deleted by the prune once expired. No foreign key: the window
-- outlives its job's row.
CREATE TABLE IF NOT EXISTS {schema}.soniq_unique_windows (
    key        text        PRIMARY KEY,
    job_id     text        NOT NULL,
    starts_at  timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS soniq_unique_windows_expires_idx ON {schema}.soniq_unique_windows (expires_at);
""",
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version


async def applied_versions(connection: asyncpg.Connection, schema: str) -> set[int]:
    exists = await connection.fetchval("SELECT to_regclass($1)", f"{quote_ident(schema)}.soniq_migrations")
    if exists is None:
        return set()
    rows = await connection.fetch(f"SELECT version FROM {quote_ident(schema)}.soniq_migrations")
    return {int(row["version"]) for row in rows}


async def is_current(connection: asyncpg.Connection, schema: str) -> bool:
    """Cheap check, taken without the lock, that nothing is left to apply."""
    # a 0.1.0 (or any other) schema is never current, whatever it records.
    from soniq_postgres.legacy_010 import detect

    family, applied = await detect(connection, schema, LATEST_VERSION)
    return family.value == "soniq" and LATEST_VERSION in applied


async def migrate(connection: asyncpg.Connection, schema: str) -> list[int]:
    """Apply every missing migration in one transaction; return the versions applied."""
    quoted = quote_ident(schema)
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", MIGRATION_LOCK, schema)
        # refuse (changing nothing) a schema that is not ours or empty.
        from soniq_postgres.legacy_010 import detect, needs_setup, refusal

        family, found = await detect(connection, schema, LATEST_VERSION)
        if family.value == "soniq-0.1.0":
            raise needs_setup(schema)
        if family.value not in ("empty", "soniq"):
            raise refusal(family, schema, found, LATEST_VERSION)
        await connection.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
        await connection.execute(
            f"""CREATE TABLE IF NOT EXISTS {quoted}.soniq_migrations (
                    version    integer     PRIMARY KEY,
                    name       text        NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )"""
        )
        done = await applied_versions(connection, schema)
        applied: list[int] = []
        for migration in MIGRATIONS:
            if migration.version in done:
                continue
            await connection.execute(migration.sql.format(schema=quoted))
            await connection.execute(
                f"INSERT INTO {quoted}.soniq_migrations (version, name) VALUES ($1, $2)",
                migration.version,
                migration.name,
            )
            applied.append(migration.version)
    return applied
