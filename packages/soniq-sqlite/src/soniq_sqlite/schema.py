"""The SQLite schema and its version, kept in ``PRAGMA user_version``.

Timestamps are INTEGER microseconds since the Unix epoch (UTC): exact, the
same precision the records carry, and compared and ordered as plain integers.
JSON values (args, result, queues, trace context) are TEXT.

Version history:
  1 - soniq_jobs, soniq_dead_letter_jobs, soniq_workers (soniq-sqlite 0.2.0).
  2 - soniq_workers.job_names: the names a worker registered, JSON text (NULL before).
  3 - the dashboard reads' indexes; soniq_workers.state, state_changed_at, last_shutdown.
  4 - soniq_schedules, soniq_leader, soniq_jobs.expires_at with its partial index.
  5 - soniq_jobs.dedup_key and producer_id, and the partial unique index that makes a queued
      row's dedup key exclusive.
  6 - soniq_jobs.depends_on, waiting_on, dependency_policy, limit_key,
      cancel_requested, watched; the edge table soniq_job_dependencies and the trigger that
      resolves dependents when a row becomes done; soniq_rate_windows; the claim indexes hold
      only claimable rows (``waiting_on = 0``); an index of processing rows by limit group.
  7 - soniq_jobs.shutdown_nacks, version, steps and checkpoint; soniq_dead_letter_jobs.version;
      soniq_workers.job_versions; the table soniq_paused_queues. Every new column has a default,
      so rows written before (or by a writer that names only the old columns, such as
      soniq-django's insert) read as version 1, no steps, no checkpoint, no shutdown nacks.
  8 - soniq_jobs.progress and logs, soniq_dead_letter_jobs.logs (JobProgressStore, JobLogStore):
      nullable TEXT, so rows written before read as no progress and no logs.
  9 - soniq_jobs.debounce_deadline (DebouncedJobs; nullable, so rows written before are not
      debounced) and the table soniq_unique_windows with its expiry index (UniqueWindows).
A future version adds a step to `MIGRATIONS`; `setup()` runs every step above
the file's `user_version` in one write transaction.
"""

from __future__ import annotations

SCHEMA_VERSION = 9

JOB_STATUSES = ("queued", "processing", "done", "cancelled")
WORKER_STATUSES = ("active", "stopping", "stopped")


def _in_list(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)


_VERSION_1 = (
    f"""
    CREATE TABLE IF NOT EXISTS soniq_jobs (
        id            TEXT PRIMARY KEY NOT NULL,
        job_name      TEXT NOT NULL,
        args          TEXT NOT NULL DEFAULT '{{}}',
        status        TEXT NOT NULL CHECK (status IN ({_in_list(JOB_STATUSES)})),
        attempts      INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
        max_attempts  INTEGER NOT NULL CHECK (max_attempts >= 1),
        queue         TEXT NOT NULL,
        priority      INTEGER NOT NULL,
        scheduled_at  INTEGER NOT NULL,
        last_error    TEXT,
        worker_id     TEXT,
        result        TEXT,
        created_at    INTEGER NOT NULL,
        updated_at    INTEGER NOT NULL,
        started_at    INTEGER,
        trace_context TEXT
    )
    """,
    # The claim path: due queued rows of one queue, in claim order.
    """
    CREATE INDEX IF NOT EXISTS soniq_jobs_claim_by_queue
        ON soniq_jobs (queue, priority, scheduled_at, created_at, id)
        WHERE status = 'queued'
    """,
    # The claim path when a worker serves every queue.
    """
    CREATE INDEX IF NOT EXISTS soniq_jobs_claim_any_queue
        ON soniq_jobs (priority, scheduled_at, created_at, id)
        WHERE status = 'queued'
    """,
    # Stale recovery: the in-flight rows of a worker.
    """
    CREATE INDEX IF NOT EXISTS soniq_jobs_processing_by_worker
        ON soniq_jobs (worker_id)
        WHERE status = 'processing'
    """,
    """
    CREATE INDEX IF NOT EXISTS soniq_jobs_by_created_at
        ON soniq_jobs (created_at)
    """,
    """
    CREATE TABLE IF NOT EXISTS soniq_dead_letter_jobs (
        id                      TEXT PRIMARY KEY NOT NULL,
        job_name                TEXT NOT NULL,
        args                    TEXT NOT NULL DEFAULT '{}',
        queue                   TEXT NOT NULL,
        attempts                INTEGER NOT NULL,
        max_attempts            INTEGER NOT NULL,
        priority                INTEGER NOT NULL,
        last_error              TEXT,
        dead_letter_reason      TEXT NOT NULL,
        moved_to_dead_letter_at INTEGER NOT NULL,
        resurrection_count      INTEGER NOT NULL DEFAULT 0,
        last_resurrection_at    INTEGER
    )
    """,
    """
    CREATE INDEX IF NOT EXISTS soniq_dead_letter_jobs_by_moved_at
        ON soniq_dead_letter_jobs (moved_to_dead_letter_at)
    """,
    f"""
    CREATE TABLE IF NOT EXISTS soniq_workers (
        id             TEXT PRIMARY KEY NOT NULL,
        hostname       TEXT NOT NULL,
        pid            INTEGER NOT NULL,
        queues         TEXT,
        concurrency    INTEGER NOT NULL,
        status         TEXT NOT NULL CHECK (status IN ({_in_list(WORKER_STATUSES)})),
        last_heartbeat INTEGER NOT NULL,
        started_at     INTEGER NOT NULL
    )
    """,
)

_VERSION_2 = ("ALTER TABLE soniq_workers ADD COLUMN job_names TEXT",)

_VERSION_3 = (
    "ALTER TABLE soniq_workers ADD COLUMN state TEXT",
    "ALTER TABLE soniq_workers ADD COLUMN state_changed_at INTEGER",
    "ALTER TABLE soniq_workers ADD COLUMN last_shutdown TEXT",
    # job_counts: one covering index scan gives every count, `scheduled` and the oldest queued row.
    "CREATE INDEX IF NOT EXISTS soniq_jobs_counts ON soniq_jobs (queue, status, scheduled_at, created_at)",
    # job_page's keyset order, and the same order within one job name.
    "CREATE INDEX IF NOT EXISTS soniq_jobs_page ON soniq_jobs (created_at, id)",
    "CREATE INDEX IF NOT EXISTS soniq_jobs_page_by_name ON soniq_jobs (job_name, created_at, id)",
    # job_activity reads only recent done rows.
    "CREATE INDEX IF NOT EXISTS soniq_jobs_done_at ON soniq_jobs (updated_at, queue) WHERE status = 'done'",
    "CREATE INDEX IF NOT EXISTS soniq_dead_letter_jobs_by_queue "
    "ON soniq_dead_letter_jobs (queue, moved_to_dead_letter_at)",
)

_VERSION_4 = (
    """
    CREATE TABLE IF NOT EXISTS soniq_schedules (
        name           TEXT PRIMARY KEY NOT NULL,
        job_name       TEXT NOT NULL,
        queue          TEXT NOT NULL,
        priority       INTEGER NOT NULL,
        max_attempts   INTEGER NOT NULL CHECK (max_attempts >= 1),
        args           TEXT NOT NULL DEFAULT '{}',
        cron           TEXT,
        every_seconds  REAL,
        timezone       TEXT NOT NULL,
        catch_up       TEXT NOT NULL,
        catch_up_limit INTEGER NOT NULL,
        paused         INTEGER NOT NULL DEFAULT 0,
        next_run       INTEGER NOT NULL,
        last_run       INTEGER,
        run_count      INTEGER NOT NULL DEFAULT 0,
        last_job_id    TEXT,
        created_at     INTEGER NOT NULL,
        updated_at     INTEGER NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS soniq_schedules_due ON soniq_schedules (next_run) WHERE paused = 0",
    """
    CREATE TABLE IF NOT EXISTS soniq_leader (
        name        TEXT PRIMARY KEY NOT NULL,
        holder      TEXT NOT NULL,
        acquired_at INTEGER NOT NULL,
        renewed_at  INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL
    )
    """,
    "ALTER TABLE soniq_jobs ADD COLUMN expires_at INTEGER",
    # Pruning reads only rows that may expire, oldest expiry first.
    "CREATE INDEX IF NOT EXISTS soniq_jobs_expires ON soniq_jobs (expires_at) WHERE expires_at IS NOT NULL",
)

_VERSION_5 = (
    "ALTER TABLE soniq_jobs ADD COLUMN dedup_key TEXT",
    "ALTER TABLE soniq_jobs ADD COLUMN producer_id TEXT",
    # At most one queued row per key: enqueue's upsert targets exactly this index.
    "CREATE UNIQUE INDEX IF NOT EXISTS soniq_jobs_dedup ON soniq_jobs (dedup_key) "
    "WHERE status = 'queued' AND dedup_key IS NOT NULL",
)

_VERSION_6 = (
    "ALTER TABLE soniq_jobs ADD COLUMN depends_on TEXT NOT NULL DEFAULT '[]'",
    "ALTER TABLE soniq_jobs ADD COLUMN waiting_on INTEGER NOT NULL DEFAULT 0 CHECK (waiting_on >= 0)",
    "ALTER TABLE soniq_jobs ADD COLUMN dependency_policy TEXT NOT NULL DEFAULT 'cancel' "
    "CHECK (dependency_policy IN ('cancel', 'run'))",
    "ALTER TABLE soniq_jobs ADD COLUMN limit_key TEXT",
    "ALTER TABLE soniq_jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE soniq_jobs ADD COLUMN watched INTEGER NOT NULL DEFAULT 0",
    # One edge per pending dependency: resolving a row reads its own dependents, never a scan.
    """
    CREATE TABLE IF NOT EXISTS soniq_job_dependencies (
        dependency_id TEXT NOT NULL,
        job_id        TEXT NOT NULL,
        PRIMARY KEY (dependency_id, job_id)
    ) WITHOUT ROWID
    """,
    # A row becoming done resolves its dependents in the same statement, whoever writes it (a
    # completion batch, the combined writes, a delete_row completion). A row without dependents
    # pays one probe of the edge table's primary key. Failing dependents (cancel, dead letter,
    # delete) cascades, so that runs in Python inside the writing transaction (soniq_sqlite.dependencies).
    """
    CREATE TRIGGER IF NOT EXISTS soniq_jobs_resolve_dependents
    AFTER UPDATE OF status ON soniq_jobs
    WHEN NEW.status = 'done' AND OLD.status <> 'done'
        AND EXISTS (SELECT 1 FROM soniq_job_dependencies WHERE dependency_id = NEW.id)
    BEGIN
        UPDATE soniq_jobs SET waiting_on = waiting_on - 1
            WHERE id IN (SELECT job_id FROM soniq_job_dependencies WHERE dependency_id = NEW.id)
            AND status = 'queued' AND waiting_on > 0;
        DELETE FROM soniq_job_dependencies WHERE dependency_id = NEW.id;
    END
    """,
    # Claims of a limit group per fixed window (soniq_sqlite.limits): one row per group and window.
    """
    CREATE TABLE IF NOT EXISTS soniq_rate_windows (
        group_key    TEXT NOT NULL,
        window_start INTEGER NOT NULL,
        claims       INTEGER NOT NULL,
        PRIMARY KEY (group_key, window_start)
    ) WITHOUT ROWID
    """,
    # The claim indexes hold only claimable rows: a blocked row (waiting_on > 0) is not in them,
    # so the unlimited claim skips blocked rows at no cost and reads exactly what it did before.
    "DROP INDEX IF EXISTS soniq_jobs_claim_by_queue",
    "DROP INDEX IF EXISTS soniq_jobs_claim_any_queue",
    """
    CREATE INDEX IF NOT EXISTS soniq_jobs_claimable_by_queue
        ON soniq_jobs (queue, priority, scheduled_at, created_at, id)
        WHERE status = 'queued' AND waiting_on = 0
    """,
    """
    CREATE INDEX IF NOT EXISTS soniq_jobs_claimable_any_queue
        ON soniq_jobs (priority, scheduled_at, created_at, id)
        WHERE status = 'queued' AND waiting_on = 0
    """,
    # A limited claim counts processing rows per group from this covering index of in-flight rows.
    """
    CREATE INDEX IF NOT EXISTS soniq_jobs_running_groups
        ON soniq_jobs (queue, job_name, limit_key)
        WHERE status = 'processing'
    """,
)

_VERSION_7 = (
    # How many times a shutdown handed the row back after its handler had started (nack_job).
    "ALTER TABLE soniq_jobs ADD COLUMN shutdown_nacks INTEGER NOT NULL DEFAULT 0",
    # The version of the code that enqueued the row (VersionedJobs).
    "ALTER TABLE soniq_jobs ADD COLUMN version INTEGER NOT NULL DEFAULT 1 CHECK (version >= 1)",
    # Completed steps (a JSON object, step name to result) and the last checkpoint (JSON text or NULL).
    "ALTER TABLE soniq_jobs ADD COLUMN steps TEXT NOT NULL DEFAULT '{}'",
    "ALTER TABLE soniq_jobs ADD COLUMN checkpoint TEXT",
    # A dead-lettered row keeps its version, so a replay is upgraded from where it stood.
    "ALTER TABLE soniq_dead_letter_jobs ADD COLUMN version INTEGER NOT NULL DEFAULT 1",
    "ALTER TABLE soniq_workers ADD COLUMN job_versions TEXT",
    # Stored queue pauses (QueuePauseStore); claims leave these queues' rows alone.
    """
    CREATE TABLE IF NOT EXISTS soniq_paused_queues (
        queue     TEXT PRIMARY KEY NOT NULL,
        reason    TEXT,
        paused_at INTEGER NOT NULL
    )
    """,
)

_VERSION_8 = (
    # The last progress a run stored (JSON object text, JobProgressStore); it stays on the job row.
    "ALTER TABLE soniq_jobs ADD COLUMN progress TEXT",
    # The handler's log records (JSON text, JobLogStore); a dead-letter move carries them along.
    "ALTER TABLE soniq_jobs ADD COLUMN logs TEXT",
    "ALTER TABLE soniq_dead_letter_jobs ADD COLUMN logs TEXT",
)

_VERSION_9 = (
    # The latest scheduled_at a debounced row may get (microseconds); NULL: not debounced, so a
    # repeat enqueue with the row's dedup key leaves it as it is.
    "ALTER TABLE soniq_jobs ADD COLUMN debounce_deadline INTEGER",
    # One row per held key: the job that took it and when its window ends. The primary key makes
    # the check and the take one upsert; a row whose window ended is replaced by the next take.
    """
    CREATE TABLE IF NOT EXISTS soniq_unique_windows (
        key        TEXT PRIMARY KEY NOT NULL,
        job_id     TEXT NOT NULL,
        expires_at INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
    # The retention prune deletes ended windows, oldest first, from this index.
    "CREATE INDEX IF NOT EXISTS soniq_unique_windows_expires ON soniq_unique_windows (expires_at)",
)

MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: _VERSION_1,
    2: _VERSION_2,
    3: _VERSION_3,
    4: _VERSION_4,
    5: _VERSION_5,
    6: _VERSION_6,
    7: _VERSION_7,
    8: _VERSION_8,
    9: _VERSION_9,
}
"""Statements that bring a file from version ``n - 1`` to ``n``."""

TABLES = (
    "soniq_jobs",
    "soniq_dead_letter_jobs",
    "soniq_workers",
    "soniq_schedules",
    "soniq_leader",
    "soniq_job_dependencies",
    "soniq_rate_windows",
    "soniq_paused_queues",
    "soniq_unique_windows",
)

CLAIM_INDEX_BY_QUEUE = "soniq_jobs_claimable_by_queue"
CLAIM_INDEX_ANY_QUEUE = "soniq_jobs_claimable_any_queue"
CLAIMABLE = "status = 'queued' AND waiting_on = 0"
"""The claim indexes' predicate: every claim's WHERE repeats it so that SQLite may use them."""

JOB_COLUMNS = (
    "id, job_name, args, status, attempts, max_attempts, queue, priority, scheduled_at, "
    "last_error, worker_id, result, created_at, updated_at, started_at, trace_context, expires_at, "
    "dedup_key, producer_id, depends_on, waiting_on, dependency_policy, limit_key, cancel_requested, "
    "shutdown_nacks, version, steps, checkpoint, progress"
)
DEAD_LETTER_COLUMNS = (
    "id, job_name, args, queue, attempts, last_error, dead_letter_reason, moved_to_dead_letter_at, "
    "resurrection_count, last_resurrection_at, max_attempts, priority, version"
)
# Listings without results select NULL in the result's place and never read the column.
JOB_COLUMNS_NO_RESULT = JOB_COLUMNS.replace("worker_id, result,", "worker_id, NULL,")
WORKER_COLUMNS = (
    "id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at, job_names, "
    "state, state_changed_at, last_shutdown, job_versions"
)
