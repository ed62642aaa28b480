"""The SQL of every operation, with table names qualified by the namespace's schema.

Names are qualified rather than set through `search_path` because
transactional enqueue runs on the caller's own connection, whose
`search_path` is theirs. JSON travels as text and is cast in SQL, so a JSON
codec the caller registered on their connection cannot change what is stored.
Every statement is a single round trip; asyncpg prepares and caches each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from soniq.backend import DeadLetterFilter, DeadLetterReason
from soniq_postgres.options import quote_ident

JOB_COLUMNS = (
    "id, job_name, args::text AS args, status, attempts, max_attempts, queue, priority, "
    "scheduled_at, last_error, worker_id, result::text AS result, created_at, updated_at, "
    "started_at, trace_context::text AS trace_context, expires_at, dedup_key, producer_id, "
    "depends_on, waiting_on, dependency_policy, limit_key, cancel_requested, shutdown_nacks, version, "
    "steps::text AS steps, checkpoint::text AS checkpoint, progress::text AS progress"
)
# `logs` is never among them: a job's log is read only by `get_job_logs`.
# Listings without results never read the column: a large result costs nothing there.
JOB_COLUMNS_NO_RESULT = JOB_COLUMNS.replace("result::text AS result", "NULL::text AS result")
DEAD_COLUMNS = (
    "id, job_name, args::text AS args, queue, attempts, last_error, dead_letter_reason, "
    "moved_to_dead_letter_at, resurrection_count, last_resurrection_at, max_attempts, priority, version"
)
WORKER_COLUMNS = (
    "id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at, job_names, "
    "state, state_changed_at, last_shutdown::text AS last_shutdown, job_versions"
)
_CLAIM_ORDER = "priority, scheduled_at, created_at, id"
_MOVES = "j.debounce_deadline IS NOT NULL AND EXCLUDED.debounce_deadline IS NOT NULL"
DEBOUNCE_MOVE = f"""DO UPDATE SET
        args = CASE WHEN {_MOVES} THEN EXCLUDED.args ELSE j.args END,
        scheduled_at = CASE WHEN {_MOVES} THEN LEAST(EXCLUDED.scheduled_at, j.debounce_deadline)
                            ELSE j.scheduled_at END,
        updated_at = CASE WHEN {_MOVES} THEN now() ELSE j.updated_at END"""
"""The conflict action of every keyed insert into `soniq_jobs AS j`: the holder of the key is
written without a change, unless both it and the new job are debounced (`DebouncedJobs`); then
it takes the new job's args and start, never past its own deadline."""
_OWNED = "id = $1 AND status = 'processing' AND worker_id = $2"


def finished(rows: str, changes: str) -> str:
    """The result of a terminal write: each written row's id and `has_dependents`,
    and a job change published (delivered on commit) for each written row that is watched.

    `rows` names a CTE yielding `id`, `has_dependents` and `watched`; `changes` is the channel parameter.
    The notifications are an uncorrelated subquery, so they run once, only when a row was written.
    """
    return (
        f"SELECT r.id, r.has_dependents, "
        f"(SELECT count(pg_notify({changes}::text, w.id)) FROM {rows} AS w WHERE w.watched) AS changed "
        f"FROM {rows} AS r"
    )


class Queries:
    """SQL text for one schema."""

    def __init__(self, schema: str) -> None:
        s = quote_ident(schema)
        self.schema = schema
        self.jobs = f"{s}.soniq_jobs"
        self.dead = f"{s}.soniq_dead_letter_jobs"
        self.workers = f"{s}.soniq_workers"
        jobs, dead = self.jobs, self.dead

        # Jobs without a dedup key (the producer id is stored here too: only a key needs
        # the ON CONFLICT path). $1 ids, $2 names, $3 args, $4 queues, $5 priorities,
        # $6 scheduled_at, $7 max_attempts, $8 trace contexts, $9 channel, $10 payload,
        # $11 limit keys, $12 producer ids, $13 versions. clock_timestamp() per row keeps a batch's
        # created_at in list order.
        self.enqueue = f"""
WITH inserted AS (
    INSERT INTO {jobs} (id, job_name, args, queue, priority, scheduled_at, max_attempts,
                        trace_context, limit_key, producer_id, version, status, attempts, created_at, updated_at)
    SELECT i, n, a::json, q, p, s, m, t::json, k, pr, v, 'queued', 0, clock_timestamp(), clock_timestamp()
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[],
                $6::timestamptz[], $7::int[], $8::text[], $11::text[], $12::text[], $13::int[])
         AS r(i, n, a, q, p, s, m, t, k, pr, v)
    RETURNING 1
)
SELECT (SELECT count(*) FROM inserted) AS inserted, pg_notify($9, $10)"""
        # One job: plain VALUES plans faster than unnest over one-element arrays; the NOTIFY is
        # in the same statement, so a single enqueue is one round trip.
        self.enqueue_one = f"""
WITH inserted AS (
    INSERT INTO {jobs} (id, job_name, args, queue, priority, scheduled_at, max_attempts,
                        trace_context, limit_key, producer_id, version, status, attempts, created_at, updated_at)
    VALUES ($1, $2, $3::json, $4, $5, $6, $7, $8::json, $11::text, $12::text, $13::int, 'queued', 0,
            clock_timestamp(), clock_timestamp())
    RETURNING 1
)
SELECT (SELECT count(*) FROM inserted) AS inserted, pg_notify($9, $10)"""
        self.notify = "SELECT pg_notify($1, $2)"
        self.windows = f"{s}.soniq_unique_windows"
        # Jobs with a dedup key. A key a queued row holds hits the partial unique index and becomes
        # an update of that row, whose RETURNING yields its id; racing producers wait on the index
        # entry, so exactly one row is stored. The update is a no-op unless both the holder and the
        # new job are debounced: then it takes the new job's args and moves its start, never past
        # the holder's deadline. $9 keys, $10 producers, $11 channel, $12 payload, $13 limit keys,
        # $14 versions, $15 debounce deadlines.
        self.enqueue_keyed = f"""
WITH stored AS (
{self.keyed_insert()}
)
SELECT id, dedup_key, pg_notify($11, $12) FROM stored"""
        # The same with unique windows ($16 window keys, $17 starts, $18 ends; NULL for a job
        # without one): the window rows are taken first, and a window job is inserted only when its
        # key now names it. One row per window key comes back with the id that holds it.
        self.enqueue_windowed = f"""
WITH taken AS (
{self.take_windows_sql("$1", "$16", "$17", "$18")}
), stored AS (
{self.keyed_insert(window_keys="$16", taken="taken")}
)
SELECT id, dedup_key, NULL::text AS window_key, pg_notify($11, $12) AS woken FROM stored
UNION ALL
SELECT job_id, NULL, key, NULL FROM taken"""
        # Windows alone (the dependencies path takes them before it plans): $1 job ids, $2 keys,
        # $3 starts, $4 ends, NULL keys skipped.
        self.take_windows = self.take_windows_sql("$1", "$2", "$3", "$4")
        # Terminal writes return `finished(...)`: the caller resolves the
        # dependents of rows with `has_dependents` in the same transaction. $2 is the changes channel.
        self.delete_job = f"""
WITH gone AS (
    DELETE FROM {jobs} WHERE id = $1
    RETURNING id, status, has_dependents AND status <> 'done' AS has_dependents, watched
)
{finished("gone", "$2")}"""
        # $1 ids, $2 worker, $3 changes channel.
        self.complete_deleting = self.completing(deleting=True, guarded=False)
        self.complete_deleting_guarded = self.completing(deleting=True, guarded=True)

        self.get_job = f"SELECT {JOB_COLUMNS} FROM {jobs} WHERE id = $1"
        # $1 id, $2 changes channel.
        self.cancel = f"""
WITH cancelled AS (
    UPDATE {jobs} SET status = 'cancelled', updated_at = now()
    WHERE id = $1 AND status = 'queued'
    RETURNING id, has_dependents, watched
)
{finished("cancelled", "$2")}"""

        # -- cancelling running jobs, watched jobs --
        # $1 id, $2 changes channel. A queued row is cancelled; a processing one is flagged (its
        # updated_at kept, so stale recovery's fence still holds) and its owner told, always.
        self.request_cancel = f"""
WITH c AS (
    UPDATE {jobs} SET
        status = CASE WHEN status = 'queued' THEN 'cancelled' ELSE status END,
        cancel_requested = cancel_requested OR status = 'processing',
        updated_at = CASE WHEN status = 'queued' THEN now() ELSE updated_at END
    WHERE id = $1 AND status IN ('queued', 'processing')
    RETURNING id, status, has_dependents AND status = 'cancelled' AS has_dependents, watched
)
SELECT c.id, c.status, c.has_dependents,
       (SELECT count(pg_notify($2::text, w.id)) FROM c AS w WHERE w.status = 'processing' OR w.watched) AS changed
FROM c"""
        self.finished_status = f"""
SELECT (SELECT status FROM {jobs} WHERE id = $1) AS status,
       EXISTS (SELECT 1 FROM {dead} WHERE id = $1) AS dead"""
        self.cancel_requests = f"""
SELECT id FROM {jobs} WHERE status = 'processing' AND worker_id = $1 AND cancel_requested"""
        # $1 id, $2 worker, $3 message, $4 changes channel.
        self.finish_cancel = f"""
WITH stopped AS (
    UPDATE {jobs} SET status = 'cancelled', worker_id = NULL, last_error = $3, updated_at = now()
    WHERE {_OWNED}
    RETURNING id, has_dependents, watched
)
{finished("stopped", "$4")}"""
        self.watch = f"UPDATE {jobs} SET watched = true WHERE id = ANY($1::text[]) AND NOT watched"

        self.mark_started = f"""
UPDATE {jobs} SET started_at = now(), updated_at = now()
WHERE id = ANY($1::text[]) AND status = 'processing' AND worker_id = $2
RETURNING id"""
        # $1 ids, $2 worker, $3 results, $4 expiries, $5 changes channel.
        self.complete_many = self.completing(deleting=False, guarded=False)
        self.complete_many_guarded = self.completing(deleting=False, guarded=True)
        self.retry = f"""
UPDATE {jobs} SET status = 'queued', attempts = attempts + 1, last_error = $3, scheduled_at = $4,
                  worker_id = NULL, started_at = NULL, updated_at = now()
WHERE {_OWNED}"""
        self.snooze = f"""
UPDATE {jobs} SET status = 'queued', scheduled_at = $3, worker_id = NULL, started_at = NULL,
                  updated_at = now()
WHERE {_OWNED}"""
        # $3 handler_started: a shutdown cut the handler off, which the row counts.
        self.nack = f"""
UPDATE {jobs} SET status = 'queued', worker_id = NULL, updated_at = now(), scheduled_at = now(),
                  started_at = NULL, shutdown_nacks = shutdown_nacks + CASE WHEN $3::bool THEN 1 ELSE 0 END
WHERE {_OWNED}"""
        # Steps and checkpoints, fenced like every worker write; updated_at is left alone, so
        # stale recovery's fence on it still holds. The step object is rebuilt from its entries
        # (json, not jsonb: the values keep their text, NUL escapes included) with one key set.
        # $3 name, $4 value (JSON text).
        self.save_step = f"""
UPDATE {jobs} SET steps = (
    SELECT json_object_agg(e.k, e.v) FROM (
        SELECT key AS k, value AS v FROM json_each(steps) WHERE key <> $3::text
        UNION ALL SELECT $3::text, $4::json
    ) AS e)
WHERE {_OWNED}"""
        self.save_checkpoint = f"UPDATE {jobs} SET checkpoint = $3::json WHERE {_OWNED}"
        # Progress and logs, fenced and leaving updated_at alone the same way. $3 the text core built.
        self.save_progress = f"UPDATE {jobs} SET progress = $3::json WHERE {_OWNED}"
        self.save_job_logs = f"UPDATE {jobs} SET logs = $3::text WHERE {_OWNED}"
        # The job row's logs, else those its dead-letter row carried.
        self.get_job_logs = f"""
SELECT COALESCE((SELECT logs FROM {jobs} WHERE id = $1), (SELECT logs FROM {dead} WHERE id = $1)) AS logs"""

        # -- queue pauses --
        paused = f"{s}.soniq_paused_queues"
        self.paused = paused
        # A pause of a paused queue keeps its paused_at; `xmax = 0` only on a fresh insert.
        self.pause_queue = f"""
INSERT INTO {paused} AS p (queue, reason, paused_at) VALUES ($1, $2, now())
ON CONFLICT (queue) DO UPDATE SET reason = EXCLUDED.reason
RETURNING (p.xmax = 0) AS inserted"""
        # $2 wake channel: waiting workers hear of the queue at once.
        self.resume_queue = f"""
WITH gone AS (DELETE FROM {paused} WHERE queue = $1 RETURNING queue)
SELECT queue, pg_notify($2::text, queue) FROM gone"""
        self.paused_queues = f"SELECT queue, reason, paused_at FROM {paused} ORDER BY queue"
        # One statement, so the delete and the insert commit together or not at all. $5 changes channel.
        self.dead_letter = f"""
WITH moved AS (
    DELETE FROM {jobs} WHERE {_OWNED}
    RETURNING id, job_name, args, queue, attempts + 1 AS attempts, max_attempts, priority,
              $3::text AS last_error, $4::text AS reason, has_dependents, watched, version, logs
), dead AS (
{self.dead_letter_insert("moved")}
)
{finished("moved", "$5")}"""

        self.register_worker = f"""
INSERT INTO {self.workers} (id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at,
                            job_names, job_versions)
VALUES ($1, $2, $3, $4, $5, 'active', now(), now(), $6, $7)
ON CONFLICT (id) DO UPDATE SET
    hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, queues = EXCLUDED.queues,
    concurrency = EXCLUDED.concurrency, status = 'active', job_names = EXCLUDED.job_names,
    job_versions = EXCLUDED.job_versions,
    last_heartbeat = EXCLUDED.last_heartbeat, started_at = EXCLUDED.started_at,
    state = NULL, state_changed_at = NULL, last_shutdown = NULL"""
        self.heartbeat = f"""
UPDATE {self.workers} SET last_heartbeat = now() WHERE id = $1 AND status <> 'stopped'"""
        # A row recovery already marked `stopped` is never revived as `stopping`.
        self.set_worker_status = f"""
UPDATE {self.workers} SET status = $2, last_heartbeat = now(),
    state = COALESCE($3::text, state),
    state_changed_at = CASE WHEN $3::text IS NULL THEN state_changed_at ELSE now() END,
    last_shutdown = COALESCE($4::json, last_shutdown)
WHERE id = $1 AND (status <> 'stopped' OR $2 = 'stopped')"""
        self.list_workers = f"SELECT {WORKER_COLUMNS} FROM {self.workers} ORDER BY started_at, id"

        # Queued rows are counted in two parts, each read from its own partial index (migration 7):
        # claimable ones from the claim index, ones waiting for dependencies from the waiting index.
        self.stats_all = f"""
SELECT (SELECT count(*) FROM {jobs} WHERE status = 'queued' AND waiting_on = 0)
       + (SELECT count(*) FROM {jobs} WHERE status = 'queued' AND waiting_on > 0) AS queued,
       (SELECT count(*) FROM {jobs} WHERE status = 'processing') AS processing,
       (SELECT count(*) FROM {jobs} WHERE status = 'done') AS done,
       (SELECT count(*) FROM {jobs} WHERE status = 'cancelled') AS cancelled,
       (SELECT count(*) FROM {dead}) AS dead_letter"""
        self.stats_queue = f"""
SELECT (SELECT count(*) FROM {jobs} WHERE queue = $1 AND status = 'queued' AND waiting_on = 0)
       + (SELECT count(*) FROM {jobs} WHERE queue = $1 AND status = 'queued' AND waiting_on > 0) AS queued,
       (SELECT count(*) FROM {jobs} WHERE queue = $1 AND status = 'processing') AS processing,
       (SELECT count(*) FROM {jobs} WHERE queue = $1 AND status = 'done') AS done,
       (SELECT count(*) FROM {jobs} WHERE queue = $1 AND status = 'cancelled') AS cancelled,
       (SELECT count(*) FROM {dead} WHERE queue = $1) AS dead_letter"""

        self.get_dead = f"SELECT {DEAD_COLUMNS} FROM {dead} WHERE id = $1"
        self.purge_dead = f"DELETE FROM {dead} WHERE id = $1"
        # $1 known names, $2 age in seconds, $3 last_error, $4 changes channel. SKIP LOCKED leaves a row
        # that a claim holds at this moment to that claim; the move is one statement.
        self.expire_unknown = f"""
WITH picked AS (
    SELECT id FROM {jobs}
    WHERE status = 'queued' AND job_name <> ALL($1::text[])
      AND created_at < now() - make_interval(secs => $2::float8)
    FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM {jobs} AS j USING picked
    WHERE j.id = picked.id AND j.status = 'queued'
    RETURNING j.id, j.job_name, j.args, j.queue, j.attempts, j.max_attempts, j.priority,
              $3::text AS last_error, '{DeadLetterReason.UNKNOWN_JOB.value}'::text AS reason,
              j.has_dependents, j.watched, j.version, j.logs
), dead AS (
{self.dead_letter_insert("moved")}
)
{finished("moved", "$4")}"""
        # $1 dead-letter id, $2 new id, $3 scheduled_at, $4 channel.
        self.replay_dead = f"""
WITH revived AS (
    UPDATE {dead} SET resurrection_count = resurrection_count + 1, last_resurrection_at = now()
    WHERE id = $1
    RETURNING job_name, args, queue, priority, max_attempts, version
), inserted AS (
    INSERT INTO {jobs} (id, job_name, args, queue, priority, scheduled_at, max_attempts,
                        status, attempts, version, created_at, updated_at)
    SELECT $2, job_name, args, COALESCE($5::text, queue), COALESCE($6::int, priority), $3,
           COALESCE($7::int, max_attempts), 'queued', $8::int, version, now(), now()
    FROM revived
    RETURNING id, queue
)
SELECT id, pg_notify($4, queue) FROM inserted"""

    def keyed_insert(self, *, window_keys: str | None = None, taken: str | None = None) -> str:
        """The INSERT ... ON CONFLICT (dedup_key) of `enqueue_keyed` (parameters as described there).

        With `window_keys` (text[], NULL for a job without a window) and the CTE `taken` (the
        window rows as they stand after `take_windows_sql`), a window job is inserted only when
        its key names it."""
        window_column, window_alias, window_filter = "", "", ""
        if window_keys is not None:
            window_column, window_alias = f", {window_keys}::text[]", ", wk"
            window_filter = f"\n    WHERE r.wk IS NULL OR r.i IN (SELECT job_id FROM {taken})"
        return f"""    INSERT INTO {self.jobs} AS j (id, job_name, args, queue, priority, scheduled_at, max_attempts,
                        trace_context, dedup_key, producer_id, limit_key, version, debounce_deadline, status,
                        attempts, created_at, updated_at)
    SELECT i, n, a::json, q, p, s, m, t::json, k, pr, lk, v, dd, 'queued', 0, clock_timestamp(), clock_timestamp()
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[],
                $6::timestamptz[], $7::int[], $8::text[], $9::text[], $10::text[], $13::text[], $14::int[],
                $15::timestamptz[]{window_column})
         AS r(i, n, a, q, p, s, m, t, k, pr, lk, v, dd{window_alias}){window_filter}
    ON CONFLICT (dedup_key) WHERE status = 'queued' AND dedup_key IS NOT NULL
    {DEBOUNCE_MOVE}
    RETURNING id, dedup_key"""

    def take_windows_sql(self, ids: str, keys: str, starts: str, ends: str) -> str:
        """Take the window of each job with a key (`ids`, `keys`, `starts`, `ends` name array
        parameters); returns every key with the id of the job holding it afterwards.

        The upsert always writes the row, so that RETURNING yields it: a window that still holds at
        the new one's start keeps its holder and bounds, an expired one is replaced by the new job.
        ON CONFLICT DO UPDATE reads the latest committed row, waiting for a producer that took the
        key in a transaction not yet committed, so racing producers all get one id. Keys are taken
        in order, so two calls with several keys never wait on each other in a cycle."""
        held = "w.expires_at > EXCLUDED.starts_at"
        return f"""    INSERT INTO {self.windows} AS w (key, job_id, starts_at, expires_at)
    SELECT x.k, x.i, x.s, x.e
    FROM unnest({ids}::text[], {keys}::text[], {starts}::timestamptz[], {ends}::timestamptz[]) AS x(i, k, s, e)
    WHERE x.k IS NOT NULL
    ORDER BY x.k
    ON CONFLICT (key) DO UPDATE SET
        job_id = CASE WHEN {held} THEN w.job_id ELSE EXCLUDED.job_id END,
        starts_at = CASE WHEN {held} THEN w.starts_at ELSE EXCLUDED.starts_at END,
        expires_at = CASE WHEN {held} THEN w.expires_at ELSE EXCLUDED.expires_at END
    RETURNING w.key, w.job_id"""

    def dead_letter_insert(self, moved: str) -> str:
        """The one move into the dead-letter table, from the rows of the CTE `moved`.

        `moved` yields the job row's columns with the new `attempts`, plus `last_error`,
        `reason`, `version` and `logs` (steps, checkpoints and progress stay behind); every dead-letter write
        (a handler's verdict or a rescue) goes through this text, so both store a row the same way.
        """
        return f"""INSERT INTO {self.dead} (id, job_name, args, queue, attempts, max_attempts, priority,
                    last_error, dead_letter_reason, version, logs, moved_to_dead_letter_at)
SELECT id, job_name, args, queue, attempts, max_attempts, priority, last_error, reason, version, logs, now()
FROM {moved}
ON CONFLICT (id) DO UPDATE SET
    job_name = EXCLUDED.job_name, args = EXCLUDED.args, queue = EXCLUDED.queue,
    attempts = EXCLUDED.attempts, max_attempts = EXCLUDED.max_attempts,
    priority = EXCLUDED.priority, last_error = EXCLUDED.last_error,
    dead_letter_reason = EXCLUDED.dead_letter_reason, version = EXCLUDED.version, logs = EXCLUDED.logs,
    moved_to_dead_letter_at = EXCLUDED.moved_to_dead_letter_at
RETURNING id"""

    def claim(
        self, *, queue_count: int | None, by_name: bool = False, excluded: bool = False, versions: str | None = None
    ) -> str:
        """The claim statement: one queue (`$4` text), several (`$4` text[]), or all (None);
        then, each only when asked for, in this order: the job names (text[]), the excluded
        queues (text[], only without `queue_count`: a claim of named queues drops paused
        ones before it is sent), and the version bound (`versions`: see `version_filter`).

        The locked selection and the update are one statement, so a row is
        either claimed by exactly one caller or left queued. The filter on
        `status = 'queued' AND waiting_on = 0` matches the partial claim indexes
        (rows waiting for dependencies are not in them), whose column order is
        the ORDER BY, so the planner reads the first `limit` rows of the index
        instead of sorting the backlog. A claim that sends no pauses and no versions
        is the same statement as before either existed.
        """
        position = 4
        if queue_count is None:
            queue_filter = ""
        elif queue_count == 1:
            queue_filter, position = "AND queue = $4::text", 5
        else:
            queue_filter, position = "AND queue = ANY($4::text[])", 5
        # The name test is a plain filter on the rows the claim index yields in
        # order: rows of other names are passed over, never locked or written.
        # It is written so that no index can serve it: with `job_name = ANY(...)`
        # the planner combined the (job_name, created_at) index with the claim
        # index and sorted the whole backlog (100 ms a claim at 100,000 queued).
        filters = [queue_filter]
        if by_name:
            filters.append(f"AND array_position(${position}::text[], job_name) IS NOT NULL")
            position += 1
        # Paused queues and newer versions are plain filters too, for the same reason.
        if excluded and queue_count is None:
            filters.append(f"AND queue <> ALL(${position}::text[])")
            position += 1
        if versions is not None:
            filters.append(version_filter(versions, position))
        # `id = ANY(ARRAY(...))` rather than a join with a CTE: once asyncpg's prepared statement
        # switches to a generic plan, `LIMIT $2` is unknown, and the join was planned as a hash
        # join over a sequential scan of the whole table (45 ms a claim at 100,000 queued rows).
        return f"""
UPDATE {self.jobs} AS j
SET status = 'processing', worker_id = $1, updated_at = now(),
    started_at = CASE WHEN $3::bool THEN now() END, dedup_key = NULL
WHERE j.id = ANY(ARRAY(
    SELECT id FROM {self.jobs}
    WHERE status = 'queued' AND waiting_on = 0 AND scheduled_at <= now() {" ".join(f for f in filters if f)}
    ORDER BY {_CLAIM_ORDER}
    LIMIT $2
    FOR UPDATE SKIP LOCKED
))
RETURNING {", ".join("j." + c.strip() for c in JOB_COLUMNS.split(","))}"""

    def completing(self, *, deleting: bool, guarded: bool) -> str:
        """The batched completion: `done` with results, or (`deleting`, ``result_ttl = 0``) a fenced delete.

        `guarded` leaves out rows with dependents, so that the common case is one statement
        outside any transaction; the caller completes the rows left over in a transaction
        that also resolves their dependents. The guard is re-checked on the latest row
        version, so an enqueue that made a row a dependency while this waited is seen.
        """
        guard = "AND NOT j.has_dependents" if guarded else ""
        if deleting:
            return f"""
WITH written AS (
    DELETE FROM {self.jobs} AS j WHERE j.id = ANY($1::text[]) AND j.status = 'processing' AND j.worker_id = $2 {guard}
    RETURNING j.id, j.has_dependents, j.watched
)
{finished("written", "$3")}"""
        return f"""
WITH written AS (
    UPDATE {self.jobs} AS j SET status = 'done', result = r.result::json, worker_id = NULL, updated_at = now(),
                                expires_at = r.expires_at
    FROM unnest($1::text[], $3::text[], $4::timestamptz[]) AS r(id, result, expires_at)
    WHERE j.id = r.id AND j.status = 'processing' AND j.worker_id = $2 {guard}
    RETURNING j.id, j.has_dependents, j.watched
)
{finished("written", "$5")}"""


# -- the version bound of a claim ----------------------------

ONE_VERSION = "one"
"""Every name the claim may take has the same bound: one parameter, one comparison a row."""
VERSION_MAP = "map"
"""Bounds differ by name (or names outside the mapping are claimable): two parameters, the
mapping's names (text[]) and their bounds (int[]); a name not in it has no bound."""


def version_filter(kind: str, position: int) -> str:
    """The claim filter for `ClaimJobsParams.max_versions`, its parameters from `$position`."""
    if kind == ONE_VERSION:
        return f"AND version <= ${position}::int"
    return (
        f"AND version <= COALESCE((${position + 1}::int[])[array_position(${position}::text[], job_name)], 2147483647)"
    )


def version_bound(
    max_versions: Mapping[str, int] | None, job_names: Sequence[str] | None
) -> tuple[str | None, tuple[Any, ...]]:
    """How a claim sends `max_versions`: the filter kind (None: no filter) and its parameters.

    One bound serves when every value is equal and the claim is limited to names the mapping
    holds; otherwise the per-name form. An empty mapping bounds nothing.
    """
    if not max_versions:
        return None, ()
    bounds = set(max_versions.values())
    if len(bounds) == 1 and job_names is not None and all(name in max_versions for name in job_names):
        return ONE_VERSION, (next(iter(bounds)),)
    names = list(max_versions)
    return VERSION_MAP, (names, [int(max_versions[name]) for name in names])


# -- dead-letter filters ------------------------------


def dead_letter_conditions(wanted: DeadLetterFilter | None, *, first: int) -> tuple[list[str], list[Any]]:
    """SQL conditions over `soniq_dead_letter_jobs` for the filter, numbered from `$first`."""
    if wanted is None:
        return [], []
    conditions: list[str] = []
    args: list[Any] = []
    for column, given in (
        ("job_name", wanted.job_names),
        ("queue", wanted.queues),
        ("dead_letter_reason", wanted.reasons),
    ):
        if given is not None:
            args.append(list(given))
            conditions.append(f"{column} = ANY(${first + len(args) - 1}::text[])")
    for operator, value in ((">=", wanted.moved_from), ("<=", wanted.moved_to)):
        if value is not None:
            args.append(value)
            conditions.append(f"moved_to_dead_letter_at {operator} ${first + len(args) - 1}::timestamptz")
    if wanted.resurrected is not None:
        conditions.append("resurrection_count > 0" if wanted.resurrected else "resurrection_count = 0")
    return conditions, args
