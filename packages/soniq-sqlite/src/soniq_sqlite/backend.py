"""`SQLiteBackend`: Soniq's queue in one SQLite file, shared by any number of local processes."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from soniq.backend import (
    AcquireLeaseParams,
    ActivityBucket,
    BackendCapabilities,
    CancelJobParams,
    CancelOutcome,
    CancelRequestsParams,
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeadLetterPage,
    DeadLetterPageParams,
    DeadLetterRecord,
    DeadLetterStats,
    DeadLetterStatsParams,
    DeleteDeadLettersParams,
    DeleteJobParams,
    DueSchedulesParams,
    EnqueueJobsParams,
    ExpireUnknownJobsParams,
    FindStaleJobsParams,
    FinishCancelParams,
    FireScheduleParams,
    GetDeadLetterParams,
    GetJobLogsParams,
    GetJobParams,
    GetLeaseParams,
    GetScheduleParams,
    HeartbeatParams,
    JobActivityParams,
    JobCountsParams,
    JobPage,
    JobPageParams,
    JobRecord,
    LeaseRecord,
    ListSchedulesParams,
    MarkStartedParams,
    MigrationStep,
    NackJobParams,
    NewJob,
    PausedQueue,
    PauseQueueParams,
    PrepareWorkerParams,
    PruneDeadLettersParams,
    PruneJobsParams,
    PurgeDeadLetterParams,
    QueueCounts,
    QueueStats,
    QueueStatsParams,
    RegisterWorkerParams,
    ReleaseLeaseParams,
    RemoveScheduleParams,
    ReplayDeadLetterParams,
    RequestCancelParams,
    RescueAction,
    RescueJobsParams,
    ResealRowParams,
    ResumeQueueParams,
    RetryJobParams,
    SaveCheckpointParams,
    SaveJobLogsParams,
    SaveProgressParams,
    SaveStepParams,
    ScheduleRecord,
    SchemaReport,
    SchemaStatus,
    SealedRowPage,
    SealedRowsParams,
    SetSchedulePausedParams,
    SetupSchemaParams,
    SetWorkerStatusParams,
    SnoozeJobParams,
    StaleScan,
    UpsertScheduleParams,
    WaitForJobChangesParams,
    WaitForJobsParams,
    WatchJobsParams,
    WorkerRecord,
    WorkerStatus,
)
from soniq.backend.options import parse_bool
from soniq.errors import BackendUnavailableError, InvalidURLError, JobArgumentsError, SoniqError
from soniq_sqlite import dependencies, key_rotation, keyed, limits, reads, schedules, transitions
from soniq_sqlite.codec import (
    claim_order,
    dead_letter_from_row,
    dump_args,
    dump_ids,
    dump_json,
    dump_optional_json,
    from_us,
    from_us_or_none,
    job_from_row,
    load_steps,
    now_us,
    to_us,
    worker_from_row,
)
from soniq_sqlite.connection import Database, Synchronous, run_raw
from soniq_sqlite.dependencies import Fallout
from soniq_sqlite.location import MEMORY, DatabaseLocation, namespaced, parse_sqlite_url, validate_namespace
from soniq_sqlite.schema import (
    CLAIM_INDEX_ANY_QUEUE,
    CLAIM_INDEX_BY_QUEUE,
    CLAIMABLE,
    DEAD_LETTER_COLUMNS,
    JOB_COLUMNS,
    SCHEMA_VERSION,
    WORKER_COLUMNS,
)
from soniq_sqlite.schema_setup import drop_schema, ensure_schema, upgrade_schema
from soniq_sqlite.wakeup import JobChanges, Wakeups

ROLES = {
    "QueueStore": 1,
    "DeadLetterStore": 1,
    "ScheduleStore": 1,
    "OperatorReads": 1,
    "SchemaAdmin": 1,
    "CancelChannel": 1,
    "LimitStore": 1,
    "DependencyStore": 1,
    "RetentionStore": 1,
    "QueuePauseStore": 1,
    "JobStepStore": 1,
    "VersionedJobs": 1,
    "JobProgressStore": 1,
    "JobLogStore": 1,
    "UniqueWindows": 1,
    "DebouncedJobs": 1,
    "KeyRotationStore": 1,
}
"""Every role this backend fills, with the version of each it implements."""

DEFAULT_BUSY_TIMEOUT = 5.0
OPTIONS = ("namespace", "busy_timeout", "synchronous", "create_if_missing")
_SYNCHRONOUS: tuple[Synchronous, ...] = ("off", "normal", "full", "extra")

_INSERT_JOB = (
    "INSERT INTO soniq_jobs (id, job_name, args, status, attempts, max_attempts, queue, priority, "
    "scheduled_at, created_at, updated_at, trace_context, limit_key, version) "
    "VALUES (?, ?, ?, 'queued', 0, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_OWNED = "id = ? AND status = 'processing' AND worker_id = ?"
_IN_OWNED = "status = 'processing' AND worker_id = ?"
# A claim's stamp: the caller's clock reading (microseconds), or SQLite's own 'now' (whole
# milliseconds, read once per statement, after the statement holds the write lock) when that
# is later, i.e. when the claim waited for another process's write. So no claim is stamped
# more than a millisecond before the write that made its rows claimable (a completion that
# resolved a dependency), and no stamp is earlier than the call.
_CLAIM_NOW = "max(?, CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER))"
# In a completion's RETURNING: whether the row had dependents (read before the resolving trigger
# runs), so that this process wakes its workers for the rows that became claimable.
_HAS_DEPENDENTS = "EXISTS (SELECT 1 FROM soniq_job_dependencies WHERE dependency_id = soniq_jobs.id)"
# Values bound per statement, under the 32766 variables SQLite allows by default
# since 3.32 (this backend needs 3.35), so a worker's whole completion batch is one statement.
_VALUES_PER_STATEMENT = 32_000
# Beyond this many names a name filter binds one JSON array (json_each) instead of one value each.
_INLINE_NAMES = 500

T = TypeVar("T")


class SQLiteBackend:
    """The embedded default backend (``sqlite:///soniq.db``).

    One aiosqlite connection per instance. Several worker processes may share
    one file: WAL mode lets them read while one writes, ``busy_timeout`` makes
    a writer wait for the lock instead of failing, and every claim is a single
    ``UPDATE ... RETURNING`` statement, which holds the write lock from its
    first step, so no two processes ever claim the same row.
    """

    def __init__(
        self,
        database: str | os.PathLike[str] = "soniq.db",
        *,
        namespace: str | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        synchronous: str = "normal",
        create_if_missing: bool = True,
    ) -> None:
        namespace = validate_namespace(namespace)
        target = os.fspath(database)
        base = DatabaseLocation(path=None) if target == MEMORY else DatabaseLocation(path=_absolute(target))
        self.namespace = namespace
        self.location = namespaced(base, namespace)
        self._db = Database(
            self.location,
            busy_timeout=_check_busy_timeout(busy_timeout),
            synchronous=_check_synchronous(synchronous),
            create_if_missing=_check_bool("create_if_missing", create_if_missing),
        )
        self._wakeups = Wakeups()
        self._changes = JobChanges()
        self._schema_checked = False
        self._last_created = 0
        self._capabilities = BackendCapabilities(
            roles=ROLES,
            push_wakeup=False,
            transactional_enqueue=False,
            shared_across_processes=not self.location.is_memory,
            timestamp_precision=timedelta(microseconds=1),
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteBackend:
        """Build a backend for ``sqlite:///relative.db``, ``sqlite:////abs.db`` or
        ``sqlite:///:memory:``; opens nothing. Options (keyword, or URL query
        parameter; a keyword wins): ``namespace``, ``busy_timeout`` (seconds),
        ``synchronous`` (off, normal, full, extra), ``create_if_missing``
        (default true; false makes a missing file an error instead of a new queue)."""
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(
                f"SQLiteBackend.from_url() got unknown option(s) {', '.join(map(repr, unknown))}; "
                f"accepted options: {', '.join(OPTIONS)}"
            )
        location, from_query = parse_sqlite_url(url, OPTIONS)
        merged: dict[str, Any] = {}
        try:
            for name, text in from_query.items():
                merged[name] = _from_query(name, text)
        except ValueError as exc:
            raise InvalidURLError(f"invalid SQLite URL {url!r}: {exc}") from None
        merged.update(options)
        return cls(location.target, **merged)

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.location.target!r})"

    @property
    def capabilities(self) -> BackendCapabilities:
        return self._capabilities

    # -- lifecycle -----------------------------------------------------------

    async def connect(self) -> None:
        # schema_status() opens the file without upgrading it: the first connect() after it still checks.
        if await self._db.open() or not self._schema_checked:
            await ensure_schema(self._db)
            self._schema_checked = True

    async def close(self) -> None:
        self._wakeups.notify_all()
        self._changes.notify_all()
        await self._db.close()

    async def setup(self) -> None:
        await self._db.open()
        await upgrade_schema(self._db)

    async def setup_schema(self, params: SetupSchemaParams, /) -> SchemaReport:
        await self._db.open()
        return await upgrade_schema(self._db, dry_run=params.dry_run, force=params.force)

    async def prepare_worker(self, params: PrepareWorkerParams, /) -> None:
        # One connection serves any number of in-flight rows; nothing to size.
        await self.connect()

    async def drop_schema(self) -> None:
        await self._db.open()
        await drop_schema(self._db)

    # -- producers ---------------------------------------------------------

    async def enqueue_jobs(self, params: EnqueueJobsParams, /) -> list[str] | None:
        jobs = params.jobs
        if params.connection is not None:
            raise SoniqError(
                "soniq-sqlite cannot join a caller's transaction (capabilities.transactional_enqueue "
                "is False); enqueue without connection="
            )
        if not jobs:
            return []
        await self.connect()
        rows, due = self._job_rows(jobs)
        if any(job.depends_on for job in jobs):
            stored, due = await self._insert_with_dependencies(rows, jobs)
            self._wakeups.notify(due)
            return stored
        if any(keyed.needs_keyed_insert(job) for job in jobs):
            # Keys, windows and debounces: each check is the upsert it guards (soniq_sqlite.keyed).

            def insert_each(raw: sqlite3.Connection) -> tuple[list[str], set[str]]:
                return keyed.insert_keyed(raw, rows, jobs)

            stored, moved = await self._db.transaction_raw(insert_each)
            self._wakeups.notify(due | moved)
            return stored
        if len(rows) == 1:
            await self._db.execute(_INSERT_JOB, rows[0])
        else:
            await self._db.executemany(_INSERT_JOB, rows)
        self._wakeups.notify(due)
        return None

    async def _insert_with_dependencies(
        self, rows: Sequence[tuple[Any, ...]], jobs: Sequence[NewJob]
    ) -> tuple[list[str], set[str]]:
        """Protocol 4: jobs with `depends_on`, in one write transaction (see `soniq_sqlite.dependencies`)."""
        depends_json = [dump_ids(job.depends_on) for job in jobs]

        def body(raw: sqlite3.Connection) -> tuple[list[str], set[str]]:
            return dependencies.insert_with_dependencies(raw, rows, jobs, depends_json)

        return await self._db.transaction_raw(body)

    def _job_rows(self, jobs: Sequence[NewJob]) -> tuple[list[tuple[Any, ...]], set[str]]:
        """`_INSERT_JOB`'s values for each job (version last), and the queues that now have a due row."""
        # created_at strictly increases per instance (a microsecond per row at
        # least) so that claim order, which falls back to created_at, follows
        # the order in which jobs were given, within a batch and across calls.
        first = max(now_us(), self._last_created + 1)
        self._last_created = first + len(jobs) - 1
        rows: list[tuple[Any, ...]] = []
        due: set[str] = set()
        for offset, job in enumerate(jobs):
            scheduled = to_us(job.scheduled_at)
            created = first + offset
            if scheduled <= created:
                due.add(job.queue)
            trace = None if job.trace_context is None else dump_json(dict(job.trace_context), what="trace context")
            rows.append(
                (
                    job.id,
                    job.job_name,
                    dump_args(job.args),
                    job.max_attempts,
                    job.queue,
                    job.priority,
                    scheduled,
                    created,
                    created,
                    trace,
                    job.limit_key,
                    _check_version(job.version),
                )
            )
        return rows, due

    async def get_job(self, params: GetJobParams, /) -> JobRecord | None:
        await self.connect()
        rows = await self._db.fetchall(f"SELECT {JOB_COLUMNS} FROM soniq_jobs WHERE id = ?", (params.job_id,))
        return job_from_row(rows[0]) if rows else None

    async def cancel_job(self, params: CancelJobParams, /) -> bool:
        await self.connect()
        job_id = params.job_id

        def body(raw: sqlite3.Connection) -> Fallout | None:
            return _cancel_queued(raw, job_id, now_us())

        fallout = await self._db.transaction_raw(body)
        if fallout is None:
            return False
        self._after_failures([job_id], fallout)
        return True

    def _after_failures(self, finished: Sequence[str], fallout: Fallout) -> None:
        """In-process wake-ups after rows finished and their dependents followed (after the commit)."""
        self._changes.finished([*finished, *fallout.cancelled])
        if fallout.released:
            self._wakeups.notify_all()

    # -- the claim path ----------------------------------------------------

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        limit, names = params.limit, params.job_names
        if limit <= 0 or (params.queues is not None and not params.queues) or (names is not None and not names):
            return []
        # Paused queues leave a worker's queue list before any SQL is written; a worker serving
        # every queue gets one `queue NOT IN` term instead. Nothing is added when none is paused.
        queues = _served_queues(params.queues, params.excluded_queues)
        if queues is not None and not queues:
            return []
        extra, extra_params = _row_filters(
            names, () if queues is not None else params.excluded_queues, params.max_versions
        )
        await self.connect()
        if params.limits:
            return await self._claim_limited(params, queues, extra, extra_params)
        queue_clause = ""
        queue_params: tuple[Any, ...] = ()
        if queues is not None:
            queue_params = queues
            queue_clause = f" AND queue IN ({', '.join('?' for _ in queue_params)})"
        if extra:
            # Filters on the rows the claim index yields in order: other rows are passed over untouched.
            queue_clause += f" AND {extra}"
            queue_params = (*queue_params, *extra_params)
        # The claim index is named: left to choose, SQLite served a name or queue
        # filter from a listing index and sorted the whole backlog per claim. Rows
        # waiting on a dependency are not in the claim indexes at all (CLAIMABLE).
        index = CLAIM_INDEX_ANY_QUEUE if queues is None else CLAIM_INDEX_BY_QUEUE
        now = now_us()
        # One statement: it takes the write lock before reading, so the rows the
        # subquery picks cannot be picked by any other connection meanwhile. The
        # stamps are `_CLAIM_NOW`: not earlier than a millisecond before the lock was held.
        rows = await self._db.fetchall(
            f"UPDATE soniq_jobs SET status = 'processing', worker_id = ?, updated_at = {_CLAIM_NOW}, "
            f"started_at = CASE WHEN ? THEN {_CLAIM_NOW} END, dedup_key = NULL "
            f"WHERE id IN (SELECT id FROM soniq_jobs INDEXED BY {index} WHERE {CLAIMABLE} AND scheduled_at <= ?"
            f"{queue_clause} ORDER BY priority, scheduled_at, created_at, id LIMIT ?) "
            f"RETURNING {JOB_COLUMNS}",
            (params.worker_id, now, params.mark_started, now, now, *queue_params, limit),
        )
        return sorted((job_from_row(row) for row in rows), key=claim_order)

    async def _claim_limited(
        self, params: ClaimJobsParams, queues: tuple[str, ...] | None, extra: str, extra_params: tuple[Any, ...]
    ) -> list[JobRecord]:
        """Protocol 4 limits: count and claim in one BEGIN IMMEDIATE (see `soniq_sqlite.limits`)."""
        claim = limits.LimitedClaim(
            worker_id=params.worker_id,
            queues=queues,
            name_clause=extra,
            name_params=extra_params,
            limit=params.limit,
            mark_started=params.mark_started,
        )
        wanted = list(params.limits)

        def body(raw: sqlite3.Connection) -> list[sqlite3.Row]:
            return limits.claim_limited(raw, claim, wanted)

        rows = await self._db.transaction_raw(body)
        return sorted((job_from_row(row) for row in rows), key=claim_order)

    async def mark_started(self, params: MarkStartedParams, /) -> set[str]:
        if not params.job_ids:
            return set()
        await self.connect()
        now = now_us()
        ids = list(dict.fromkeys(params.job_ids))
        written: set[str] = set()
        for chunk in _chunks(ids, _VALUES_PER_STATEMENT):
            rows = await self._db.fetchall(
                "UPDATE soniq_jobs SET started_at = ?, updated_at = ? WHERE status = 'processing' "
                f"AND worker_id = ? AND id IN ({', '.join('?' for _ in chunk)}) RETURNING id",
                (now, now, params.worker_id, *chunk),
            )
            written.update(str(row[0]) for row in rows)
        return written

    async def complete_jobs(self, params: CompleteJobsParams, /) -> set[str]:
        if not params.results:
            return set()
        doomed = [r.job_id for r in params.results if r.delete_row]
        if doomed:
            # result_ttl = 0: the fenced delete stands in for the completion write.
            await self.connect()
            deleted = await self._complete_deleting(params.worker_id, doomed)
            rest = [r for r in params.results if not r.delete_row]
            if not rest:
                return deleted
            return deleted | await self.complete_jobs(CompleteJobsParams(worker_id=params.worker_id, results=rest))
        # A result that cannot be stored is left out (not reported as written, so
        # core settles that row); it never costs the rest of the batch.
        triples: list[tuple[str, str | None, int | None]] = []
        for r in params.results:
            try:
                result = dump_optional_json(r.result, what="the job's result")
            except JobArgumentsError:
                continue
            triples.append((r.job_id, result, None if r.expires_at is None else to_us(r.expires_at)))
        if not triples:
            return set()
        await self.connect()
        now, worker_id = now_us(), params.worker_id
        statements = []
        for chunk in _chunks(triples, _VALUES_PER_STATEMENT // 3):
            # The trigger soniq_jobs_resolve_dependents frees dependents inside this statement;
            # RETURNING says whether a row had any (read before the trigger runs), for the wake-up.
            sql = (
                "UPDATE soniq_jobs SET status = 'done', result = r.column2, worker_id = NULL, updated_at = ?, "
                f"expires_at = r.column3 FROM (VALUES {', '.join('(?, ?, ?)' for _ in chunk)}) AS r "
                "WHERE soniq_jobs.id = r.column1 "
                f"AND soniq_jobs.status = 'processing' AND soniq_jobs.worker_id = ? RETURNING soniq_jobs.id, "
                f"{_HAS_DEPENDENTS}"
            )
            statements.append((sql, (now, *(value for triple in chunk for value in triple), worker_id)))
        try:
            if len(statements) == 1:
                # One statement is atomic on its own: no BEGIN and COMMIT round trips on the hot path.
                returned = await self._db.fetchall(*statements[0])
            else:

                async def every_chunk(conn: aiosqlite.Connection) -> list[sqlite3.Row]:
                    found: list[sqlite3.Row] = []
                    for sql, values in statements:
                        found.extend(await conn.execute_fetchall(sql, values))
                    return found

                returned = await self._db.transaction(every_chunk)
            written = {str(row[0]) for row in returned}
            self._finished(written, any(row[1] for row in returned))
            return written
        except BackendUnavailableError:
            raise
        except (sqlite3.Error, ValueError, OverflowError):
            return await self._complete_one_by_one(triples, now, worker_id)

    async def _complete_deleting(self, worker_id: str, doomed: Sequence[str]) -> set[str]:
        """The fenced delete of `result_ttl = 0`, in one transaction: the rows become `done` first,
        so the resolving trigger frees their dependents exactly as a stored completion does."""
        now = now_us()

        def body(raw: sqlite3.Connection) -> tuple[set[str], bool]:
            deleted: set[str] = set()
            released = False
            for id_chunk in _chunks(doomed, _VALUES_PER_STATEMENT):
                marks = ", ".join("?" for _ in id_chunk)
                rows = raw.execute(
                    f"UPDATE soniq_jobs SET status = 'done', worker_id = NULL, updated_at = ? WHERE {_IN_OWNED} "
                    f"AND id IN ({marks}) RETURNING id, {_HAS_DEPENDENTS}",
                    (now, worker_id, *id_chunk),
                ).fetchall()
                ids = [str(row[0]) for row in rows]
                released = released or any(row[1] for row in rows)
                if ids:
                    raw.execute(f"DELETE FROM soniq_jobs WHERE id IN ({', '.join('?' for _ in ids)})", ids)
                deleted.update(ids)
            return deleted, released

        deleted, released = await self._db.transaction_raw(body)
        self._finished(deleted, released)
        return deleted

    def _finished(self, ids: set[str], released: bool) -> None:
        """In-process wake-ups after completions (after the commit)."""
        if ids:
            self._changes.finished(ids)
        if released:
            self._wakeups.notify_all()

    async def _complete_one_by_one(
        self, triples: list[tuple[str, str | None, int | None]], now: int, worker_id: str
    ) -> set[str]:
        """The batch failed for a reason other than the store being gone: write the
        rows the store accepts; each bad one stays `processing` for core to settle."""
        written: set[str] = set()
        for job_id, result, expires_at in triples:
            try:
                rows = await self._db.fetchall(
                    "UPDATE soniq_jobs SET status = 'done', result = ?, worker_id = NULL, updated_at = ?, "
                    "expires_at = ? WHERE id = ? AND status = 'processing' AND worker_id = ? "
                    f"RETURNING id, {_HAS_DEPENDENTS}",
                    (result, now, expires_at, job_id, worker_id),
                )
            except BackendUnavailableError:
                raise
            except (sqlite3.Error, ValueError, OverflowError):
                continue
            written.update(str(row[0]) for row in rows)
            self._finished({str(row[0]) for row in rows}, any(row[1] for row in rows))
        return written

    async def retry_job(self, params: RetryJobParams, /) -> bool:
        await self.connect()
        changed = await self._db.execute(
            "UPDATE soniq_jobs SET status = 'queued', attempts = attempts + 1, last_error = ?, "
            f"scheduled_at = ?, worker_id = NULL, started_at = NULL, updated_at = ? WHERE {_OWNED}",
            (params.error, to_us(params.scheduled_at), now_us(), params.job_id, params.worker_id),
        )
        return changed == 1

    async def snooze_job(self, params: SnoozeJobParams, /) -> bool:
        await self.connect()
        changed = await self._db.execute(
            "UPDATE soniq_jobs SET status = 'queued', scheduled_at = ?, worker_id = NULL, started_at = NULL, "
            f"updated_at = ? WHERE {_OWNED}",
            (to_us(params.scheduled_at), now_us(), params.job_id, params.worker_id),
        )
        return changed == 1

    async def dead_letter_job(self, params: DeadLetterJobParams, /) -> bool:
        await self.connect()
        reason = str(getattr(params.reason, "value", params.reason))

        fallout = Fallout()

        async def body(conn: aiosqlite.Connection) -> bool:
            return await transitions.dead_letter_owned(
                conn,
                job_id=params.job_id,
                worker_id=params.worker_id,
                error=params.error,
                reason=reason,
                fallout=fallout,
            )

        moved = await self._db.transaction(body)
        if moved:
            self._after_failures([params.job_id], fallout)
        return moved

    async def nack_job(self, params: NackJobParams, /) -> bool:
        await self.connect()
        now = now_us()
        # A hand-back after the handler started counts in shutdown_nacks, in the same fenced write.
        rows = await self._db.fetchall(
            "UPDATE soniq_jobs SET status = 'queued', worker_id = NULL, updated_at = ?, scheduled_at = ?, "
            f"started_at = NULL, shutdown_nacks = shutdown_nacks + ? WHERE {_OWNED} RETURNING queue",
            (now, now, 1 if params.handler_started else 0, params.job_id, params.worker_id),
        )
        self._wakeups.notify(str(row[0]) for row in rows)
        return len(rows) == 1

    # -- workers -----------------------------------------------------------

    async def register_worker(self, params: RegisterWorkerParams, /) -> None:
        await self.connect()
        worker, now = params.worker, now_us()
        queues = None if worker.queues is None else dump_json(list(worker.queues), what="worker queues")
        names = None if worker.job_names is None else dump_json(list(worker.job_names), what="worker job names")
        versions = (
            None
            if worker.job_versions is None
            else dump_json({str(k): int(v) for k, v in worker.job_versions.items()}, what="worker job versions")
        )
        await self._db.execute(
            "INSERT OR REPLACE INTO soniq_workers (id, hostname, pid, queues, concurrency, status, "
            "last_heartbeat, started_at, job_names, job_versions) VALUES (?, ?, ?, ?, ?, 'active', ?, ?, ?, ?)",
            (worker.id, worker.hostname, worker.pid, queues, worker.concurrency, now, now, names, versions),
        )

    async def heartbeat(self, params: HeartbeatParams, /) -> bool:
        await self.connect()
        changed = await self._db.execute(
            "UPDATE soniq_workers SET last_heartbeat = ? WHERE id = ? AND status != 'stopped'",
            (now_us(), params.worker_id),
        )
        return changed == 1

    async def set_worker_status(self, params: SetWorkerStatusParams, /) -> bool:
        await self.connect()
        status = WorkerStatus(params.status).value
        now = now_us()
        shutdown = dump_optional_json(
            None if params.last_shutdown is None else dict(params.last_shutdown), what="last_shutdown"
        )
        # A row recovery already marked `stopped` is never revived as `stopping`.
        changed = await self._db.execute(
            "UPDATE soniq_workers SET status = ?, last_heartbeat = ?, state = COALESCE(?, state), "
            "state_changed_at = CASE WHEN ? IS NULL THEN state_changed_at ELSE ? END, "
            "last_shutdown = COALESCE(?, last_shutdown) "
            "WHERE id = ? AND (status != 'stopped' OR ? = 'stopped')",
            (status, now, params.state, params.state, now, shutdown, params.worker_id, status),
        )
        return changed == 1

    async def list_workers(self) -> list[WorkerRecord]:
        await self.connect()
        rows = await self._db.fetchall(f"SELECT {WORKER_COLUMNS} FROM soniq_workers ORDER BY started_at, id")
        return [worker_from_row(row) for row in rows]

    # -- queue pauses (QueuePauseStore) ---------------------------------------

    async def pause_queue(self, params: PauseQueueParams, /) -> bool:
        await self.connect()
        queue, reason = params.queue, params.reason

        def body(raw: sqlite3.Connection) -> bool:
            # Inside BEGIN IMMEDIATE: the first pause inserts; a repeat replaces only the reason.
            inserted = raw.execute(
                "INSERT OR IGNORE INTO soniq_paused_queues (queue, reason, paused_at) VALUES (?, ?, ?)",
                (queue, reason, now_us()),
            ).rowcount
            if inserted == 1:
                return True
            raw.execute("UPDATE soniq_paused_queues SET reason = ? WHERE queue = ?", (reason, queue))
            return False

        return await self._db.transaction_raw(body)

    async def resume_queue(self, params: ResumeQueueParams, /) -> bool:
        await self.connect()
        removed = await self._db.execute("DELETE FROM soniq_paused_queues WHERE queue = ?", (params.queue,))
        if removed:
            # This process's idle workers look again now; others at their next poll.
            self._wakeups.notify([params.queue])
        return removed == 1

    async def paused_queues(self) -> list[PausedQueue]:
        await self.connect()
        rows = await self._db.fetchall("SELECT queue, reason, paused_at FROM soniq_paused_queues ORDER BY queue")
        return [PausedQueue(queue=str(row[0]), reason=row[1], paused_at=from_us(int(row[2]))) for row in rows]

    # -- steps and checkpoints (JobStepStore) --------------------------------

    async def save_step(self, params: SaveStepParams, /) -> bool:
        await self.connect()
        job_id, worker_id, name, value = params.job_id, params.worker_id, params.name, params.value_json
        if json.dumps(name, ensure_ascii=False) == f'"{name}"':
            # A name JSON needs no escape for is a valid quoted path label: one fenced statement
            # sets that key and keeps the others.
            changed = await self._db.execute(
                f"UPDATE soniq_jobs SET steps = json_set(steps, ?, json(?)) WHERE {_OWNED}",
                (f'$."{name}"', value, job_id, worker_id),
            )
            return changed == 1

        def body(raw: sqlite3.Connection) -> bool:
            # SQLite's JSON paths cannot quote every name: read, set and write in one BEGIN IMMEDIATE.
            found = raw.execute(f"SELECT steps FROM soniq_jobs WHERE {_OWNED}", (job_id, worker_id)).fetchone()
            if found is None:
                return False
            steps = load_steps(found[0])
            steps[name] = json.loads(value)
            text = dump_json(steps, what="job steps")
            raw.execute(f"UPDATE soniq_jobs SET steps = ? WHERE {_OWNED}", (text, job_id, worker_id))
            return True

        return await self._db.transaction_raw(body)

    async def save_checkpoint(self, params: SaveCheckpointParams, /) -> bool:
        await self.connect()
        changed = await self._db.execute(
            f"UPDATE soniq_jobs SET checkpoint = json(?) WHERE {_OWNED}",
            (params.value_json, params.job_id, params.worker_id),
        )
        return changed == 1

    # -- progress and logs (JobProgressStore, JobLogStore) --------------------

    async def save_progress(self, params: SaveProgressParams, /) -> bool:
        await self.connect()
        changed = await self._db.execute(
            f"UPDATE soniq_jobs SET progress = ? WHERE {_OWNED}",
            (params.progress_json, params.job_id, params.worker_id),
        )
        return changed == 1

    async def save_job_logs(self, params: SaveJobLogsParams, /) -> bool:
        await self.connect()
        changed = await self._db.execute(
            f"UPDATE soniq_jobs SET logs = ? WHERE {_OWNED}",
            (params.logs_json, params.job_id, params.worker_id),
        )
        return changed == 1

    async def get_job_logs(self, params: GetJobLogsParams, /) -> str | None:
        await self.connect()
        rows = await self._db.fetchall(
            "SELECT COALESCE((SELECT logs FROM soniq_jobs WHERE id = ?), "
            "(SELECT logs FROM soniq_dead_letter_jobs WHERE id = ?))",
            (params.job_id, params.job_id),
        )
        return None if not rows or rows[0][0] is None else str(rows[0][0])

    # -- sealed values (KeyRotationStore, soniq_sqlite.key_rotation) ----------

    async def sealed_rows(self, params: SealedRowsParams, /) -> SealedRowPage:
        await self.connect()
        return await key_rotation.sealed_rows(self._db, params)

    async def reseal_row(self, params: ResealRowParams, /) -> bool:
        await self.connect()
        return await key_rotation.reseal_row(self._db, params)

    # -- stale recovery ------------------------------------------------------

    async def find_stale_jobs(self, params: FindStaleJobsParams, /) -> StaleScan:
        await self.connect()
        timeout = float(params.heartbeat_timeout)

        async def body(conn: aiosqlite.Connection) -> StaleScan:
            return await transitions.find_stale(conn, heartbeat_timeout=timeout)

        # BEGIN IMMEDIATE serialises sweepers: a second one waits for the lock and
        # then reads what the first left, so it never needs to report skipped.
        return await self._db.transaction(body)

    async def rescue_jobs(self, params: RescueJobsParams, /) -> set[str]:
        if not params.rescues:
            return set()
        await self.connect()
        rescues = list(params.rescues)
        fallout = Fallout()

        async def body(conn: aiosqlite.Connection) -> set[str]:
            return await transitions.apply_rescues(conn, rescues, fallout)

        written = await self._db.transaction(body)
        self._after_failures(
            [r.job_id for r in rescues if r.job_id in written and r.action is RescueAction.DEAD_LETTER], fallout
        )
        if any(r.job_id in written and r.action is not RescueAction.DEAD_LETTER for r in rescues):
            self._wakeups.notify_all()
        return written

    async def expire_unknown_jobs(self, params: ExpireUnknownJobsParams, /) -> set[str]:
        await self.connect()
        cutoff = now_us() - int(max(float(params.older_than), 0.0) * 1_000_000)
        known = list(dict.fromkeys(params.known_names))

        fallout = Fallout()

        async def body(conn: aiosqlite.Connection) -> set[str]:
            return await transitions.expire_unknown(
                conn, known_names=known, cutoff=cutoff, error=params.error, fallout=fallout
            )

        moved = await self._db.transaction(body)
        self._after_failures(sorted(moved), fallout)
        return moved

    # -- observation -------------------------------------------------------

    async def queue_stats(self, params: QueueStatsParams, /) -> QueueStats:
        await self.connect()
        where, values = _filters(queue=params.queue)
        # One statement reads one snapshot, so the six numbers agree with each other.
        rows = await self._db.fetchall(
            f"SELECT status, COUNT(*) FROM soniq_jobs{where} GROUP BY status "
            f"UNION ALL SELECT 'dead_letter', COUNT(*) FROM soniq_dead_letter_jobs{where}",
            (*values, *values),
        )
        counts = {str(row[0]): int(row[1]) for row in rows}
        return QueueStats(
            total=sum(counts.values()),
            queued=counts.get("queued", 0),
            processing=counts.get("processing", 0),
            done=counts.get("done", 0),
            dead_letter=counts.get("dead_letter", 0),
            cancelled=counts.get("cancelled", 0),
        )

    async def wait_for_jobs(self, params: WaitForJobsParams, /) -> None:
        await self._wakeups.wait(params.queues, params.timeout)

    # -- dead letters ------------------------------------------------------

    async def get_dead_letter(self, params: GetDeadLetterParams, /) -> DeadLetterRecord | None:
        await self.connect()
        rows = await self._db.fetchall(
            f"SELECT {DEAD_LETTER_COLUMNS} FROM soniq_dead_letter_jobs WHERE id = ?", (params.job_id,)
        )
        return dead_letter_from_row(rows[0]) if rows else None

    async def replay_dead_letter(self, params: ReplayDeadLetterParams, /) -> str | None:
        await self.connect()

        async def body(conn: aiosqlite.Connection) -> str | None:
            return await transitions.replay(
                conn,
                job_id=params.job_id,
                new_job_id=params.new_job_id,
                scheduled_at=params.scheduled_at,
                queue=params.queue,
                priority=params.priority,
                max_attempts=params.max_attempts,
                attempts=params.attempts,
            )

        replayed = await self._db.transaction(body)
        if replayed is not None:
            self._wakeups.notify_all()
        return replayed

    async def purge_dead_letter(self, params: PurgeDeadLetterParams, /) -> bool:
        await self.connect()
        return await self._db.execute("DELETE FROM soniq_dead_letter_jobs WHERE id = ?", (params.job_id,)) == 1

    # -- deleting jobs and bulk dead-letter operations ----

    async def delete_job(self, params: DeleteJobParams, /) -> bool:
        await self.connect()
        job_id = params.job_id

        def body(raw: sqlite3.Connection) -> Fallout | None:
            rows = raw.execute("DELETE FROM soniq_jobs WHERE id = ? RETURNING status", (job_id,)).fetchall()
            if not rows:
                return None
            if str(rows[0][0]) == "done":  # resolved when it became done; nothing waits on it any more
                return Fallout()
            return dependencies.fail_dependents(raw, [(job_id, dependencies.DELETED)], now_us())

        fallout = await self._db.transaction_raw(body)
        if fallout is None:
            return False
        self._after_failures([job_id], fallout)
        return True

    async def delete_dead_letters(self, params: DeleteDeadLettersParams, /) -> set[str]:
        if params.limit <= 0:
            return set()
        await self.connect()
        where, values = reads.dead_letter_filter(params.filter)
        rows = await self._db.fetchall(
            "DELETE FROM soniq_dead_letter_jobs WHERE id IN (SELECT id FROM soniq_dead_letter_jobs"
            f"{' WHERE ' + where if where else ''} ORDER BY moved_to_dead_letter_at, id LIMIT ?) RETURNING id",
            (*values, params.limit),
        )
        return {str(row[0]) for row in rows}

    async def dead_letter_stats(self, params: DeadLetterStatsParams, /) -> DeadLetterStats:
        await self.connect()
        where, values = reads.dead_letter_filter(params.filter) if params.filter is not None else ("", ())
        clause = f" WHERE {where}" if where else ""

        async def read(conn: aiosqlite.Connection) -> DeadLetterStats:
            async def grouped(column: str) -> dict[str, int]:
                rows = await conn.execute_fetchall(
                    f"SELECT {column}, count(*) FROM soniq_dead_letter_jobs{clause} GROUP BY {column}", values
                )
                return {str(row[0]): int(row[1]) for row in rows}

            totals = next(
                iter(
                    await conn.execute_fetchall(
                        "SELECT count(*), coalesce(sum(resurrection_count > 0), 0), min(moved_to_dead_letter_at), "
                        f"max(moved_to_dead_letter_at) FROM soniq_dead_letter_jobs{clause}",
                        values,
                    )
                )
            )
            return DeadLetterStats(
                total=int(totals[0]),
                by_job_name=await grouped("job_name"),
                by_queue=await grouped("queue"),
                by_reason=await grouped("dead_letter_reason"),
                resurrected=int(totals[1]),
                oldest_moved_at=from_us_or_none(totals[2]),
                newest_moved_at=from_us_or_none(totals[3]),
            )

        return await self._db.transaction(read, write=False)

    # -- dashboard reads (soniq_sqlite.reads) --------------------------------

    async def job_counts(self, params: JobCountsParams, /) -> list[QueueCounts]:
        await self.connect()
        return await reads.job_counts(self._db, params)

    async def job_activity(self, params: JobActivityParams, /) -> list[ActivityBucket]:
        await self.connect()
        return await reads.job_activity(self._db, params)

    async def job_page(self, params: JobPageParams, /) -> JobPage:
        await self.connect()
        return await reads.job_page(self._db, params)

    async def dead_letter_page(self, params: DeadLetterPageParams, /) -> DeadLetterPage:
        await self.connect()
        return await reads.dead_letter_page(self._db, params)

    async def queue_names(self) -> list[str]:
        await self.connect()
        return await reads.queue_names(self._db)

    # -- schema status --

    async def schema_status(self) -> SchemaStatus:
        # open() only: connect() would upgrade the schema, and this must report it untouched.
        await self._db.open()
        rows = await self._db.fetchall("PRAGMA user_version")
        current = int(rows[0][0]) if rows else 0

        def step(version: int) -> MigrationStep:
            return MigrationStep(version, SCHEMA_STEP_NAMES.get(version, f"schema version {version}"))

        return SchemaStatus(
            backend="sqlite",
            location=self.location.describe(),
            applied=tuple(step(v) for v in range(1, min(current, SCHEMA_VERSION) + 1)),
            pending=tuple(step(v) for v in range(current + 1, SCHEMA_VERSION + 1)),
            newer_than_known=current > SCHEMA_VERSION,
            details={"user_version": current},
        )

    # -- schedules, leader lease, pruning ---

    async def upsert_schedule(self, params: UpsertScheduleParams, /) -> ScheduleRecord:
        await self.connect()
        return await schedules.upsert(self._db, params)

    async def get_schedule(self, params: GetScheduleParams, /) -> ScheduleRecord | None:
        await self.connect()
        found = await schedules.select(self._db, [params.name])
        return found[0] if found else None

    async def list_schedules(self, params: ListSchedulesParams, /) -> list[ScheduleRecord]:
        await self.connect()
        return await schedules.select(self._db, None if params.names is None else list(params.names))

    async def set_schedule_paused(self, params: SetSchedulePausedParams, /) -> bool:
        await self.connect()
        return await schedules.set_paused(self._db, params)

    async def remove_schedule(self, params: RemoveScheduleParams, /) -> bool:
        await self.connect()
        return await self._db.execute("DELETE FROM soniq_schedules WHERE name = ?", (params.name,)) == 1

    async def due_schedules(self, params: DueSchedulesParams, /) -> list[ScheduleRecord]:
        await self.connect()
        return await schedules.due(self._db, params)

    async def fire_schedule(self, params: FireScheduleParams, /) -> list[str] | None:
        await self.connect()
        jobs = list(params.jobs)
        rows, due = self._job_rows(jobs)

        depends_json = [dump_ids(job.depends_on) for job in jobs]

        async def body(conn: aiosqlite.Connection) -> list[str] | None:
            if not await schedules.advance(conn, params):
                return None
            if any(job.depends_on for job in jobs):
                stored, _ = await run_raw(
                    conn, lambda raw: dependencies.insert_with_dependencies(raw, rows, jobs, depends_json)
                )
                return stored
            if rows:
                await conn.executemany(_INSERT_JOB, rows)
            return [job.id for job in jobs]

        fired = await self._db.transaction(body)
        if fired:
            self._wakeups.notify(due)
        return fired

    async def acquire_lease(self, params: AcquireLeaseParams, /) -> LeaseRecord | None:
        await self.connect()
        return await schedules.acquire(self._db, params)

    async def release_lease(self, params: ReleaseLeaseParams, /) -> bool:
        await self.connect()
        return (
            await self._db.execute(
                "DELETE FROM soniq_leader WHERE name = ? AND holder = ?", (params.name, params.holder)
            )
            == 1
        )

    async def get_lease(self, params: GetLeaseParams, /) -> LeaseRecord | None:
        await self.connect()
        return await schedules.current_lease(self._db, params.name)

    async def prune_jobs(self, params: PruneJobsParams, /) -> int:
        await self.connect()
        return await schedules.prune_jobs(self._db, params)

    async def prune_dead_letters(self, params: PruneDeadLettersParams, /) -> int:
        await self.connect()
        return await schedules.prune_dead_letters(self._db, params)

    # -- cancelling running jobs, waiting for jobs ----------

    async def request_cancel(self, params: RequestCancelParams, /) -> CancelOutcome:
        await self.connect()
        job_id = params.job_id

        def body(raw: sqlite3.Connection) -> tuple[CancelOutcome, Fallout]:
            return _request_cancel(raw, job_id, now_us())

        outcome, fallout = await self._db.transaction_raw(body)
        if outcome is CancelOutcome.CANCELLED:
            self._after_failures([job_id], fallout)
        elif outcome is CancelOutcome.REQUESTED:
            # Same-process watchers hear it now; other processes' watchers poll cancel_requests.
            self._changes.notify([job_id])
        return outcome

    async def cancel_requests(self, params: CancelRequestsParams, /) -> set[str]:
        await self.connect()
        # soniq_jobs_processing_by_worker: only this worker's in-flight rows are read.
        rows = await self._db.fetchall(
            "SELECT id FROM soniq_jobs INDEXED BY soniq_jobs_processing_by_worker "
            "WHERE worker_id = ? AND status = 'processing' AND cancel_requested = 1",
            (params.worker_id,),
        )
        return {str(row[0]) for row in rows}

    async def finish_cancel(self, params: FinishCancelParams, /) -> bool:
        await self.connect()
        job_id, worker_id, text = params.job_id, params.worker_id, params.message

        def body(raw: sqlite3.Connection) -> Fallout | None:
            now = now_us()
            rows = raw.execute(
                "UPDATE soniq_jobs SET status = 'cancelled', worker_id = NULL, last_error = ?, updated_at = ? "
                f"WHERE {_OWNED} RETURNING id",
                (text, now, job_id, worker_id),
            ).fetchall()
            if not rows:
                return None
            return dependencies.fail_dependents(raw, [(job_id, dependencies.CANCELLED)], now)

        fallout = await self._db.transaction_raw(body)
        if fallout is None:
            return False
        self._after_failures([job_id], fallout)
        return True

    async def watch_jobs(self, params: WatchJobsParams, /) -> None:
        # SQLite has no cross-process channel to publish on (push_job_changes is False), so
        # nothing is written: the ids are remembered in this instance, whose own finishing
        # writes then wake its own waiters; every other waiter re-reads its rows at its timeout.
        # (The `watched` column keeps the row's shape for a store that could publish.)
        self._changes.watch(params.job_ids)

    async def wait_for_job_changes(self, params: WaitForJobChangesParams, /) -> set[str] | None:
        return await self._changes.wait(list(params.job_ids), params.timeout)


def _cancel_queued(raw: sqlite3.Connection, job_id: str, now: int) -> Fallout | None:
    """`cancel_job` inside a write transaction: the queued row becomes `cancelled` and its
    dependents follow; None when the row was not queued (nothing written)."""
    rows = raw.execute(
        "UPDATE soniq_jobs SET status = 'cancelled', updated_at = ? WHERE id = ? AND status = 'queued' RETURNING id",
        (now, job_id),
    ).fetchall()
    if not rows:
        return None
    return dependencies.fail_dependents(raw, [(job_id, dependencies.CANCELLED)], now)


def _request_cancel(raw: sqlite3.Connection, job_id: str, now: int) -> tuple[CancelOutcome, Fallout]:
    """`request_cancel` inside a write transaction: one read of the row's status decides."""
    found = raw.execute("SELECT status FROM soniq_jobs WHERE id = ?", (job_id,)).fetchone()
    if found is None:
        dead = raw.execute("SELECT 1 FROM soniq_dead_letter_jobs WHERE id = ?", (job_id,)).fetchone()
        return (CancelOutcome.NOT_FOUND if dead is None else CancelOutcome.ALREADY_FINISHED), Fallout()
    status = str(found[0])
    if status == "queued":
        fallout = _cancel_queued(raw, job_id, now)
        return CancelOutcome.CANCELLED, fallout or Fallout()
    if status == "processing":
        # Idempotent: a second request writes nothing new (and leaves updated_at as it is).
        raw.execute("UPDATE soniq_jobs SET cancel_requested = 1 WHERE id = ? AND cancel_requested = 0", (job_id,))
        return CancelOutcome.REQUESTED, Fallout()
    return CancelOutcome.ALREADY_FINISHED, Fallout()


SCHEMA_STEP_NAMES = {
    1: "initial",
    2: "worker_job_names",
    3: "dashboard reads and worker state",
    4: "schedules, leader lease and pruning",
    5: "dedup_key, producer_id and the unique queued index",
    6: "dependencies, fleet-wide limits, cancel requests",
    7: "queue pauses, job steps and checkpoints, job versions, shutdown nacks",
    8: "job progress and job logs",
    9: "unique windows and debounced jobs",
}
"""What each `PRAGMA user_version` step added (see soniq_sqlite.schema), for ``soniq migrate-status``."""


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _name_filter(
    names: Sequence[str], *, negate: bool, column: str = "job_name", inline: bool = True
) -> tuple[str, tuple[str, ...]]:
    """``job_name IN (...)`` (or NOT IN, or another `column`) for `names`, within SQLite's
    bound-variable limit (`inline` False: always one bound JSON array)."""
    unique = tuple(dict.fromkeys(names))
    operator = "NOT IN" if negate else "IN"
    if inline and len(unique) <= _INLINE_NAMES:
        return f"{column} {operator} ({', '.join('?' for _ in unique)})", unique
    return f"{column} {operator} (SELECT value FROM json_each(?))", (json.dumps(list(unique)),)


def _served_queues(queues: Sequence[str] | None, excluded: Sequence[str]) -> tuple[str, ...] | None:
    """A claim's queue list without its paused queues (None: every queue, filtered in SQL)."""
    if queues is None:
        return None
    if not excluded:
        return tuple(dict.fromkeys(queues))
    paused = set(excluded)
    return tuple(queue for queue in dict.fromkeys(queues) if queue not in paused)


def _row_filters(
    names: Sequence[str] | None, excluded: Sequence[str], max_versions: Mapping[str, int] | None
) -> tuple[str, tuple[Any, ...]]:
    """The claim's conditions on each row beyond its queue list, ANDed (empty: none): its job
    names, the paused queues of a claim over every queue, and the newest version per name."""
    terms: list[str] = []
    values: list[Any] = []
    if names is not None:
        term, bound = _name_filter(names, negate=False)
        terms.append(term)
        values += bound
    if excluded:
        term, bound = _name_filter(excluded, negate=True, column="queue")
        terms.append(term)
        values += bound
    term, version_values = _version_filter(max_versions, names)
    if term:
        terms.append(term)
        values += version_values
    return " AND ".join(terms), tuple(values)


def _version_filter(max_versions: Mapping[str, int] | None, names: Sequence[str] | None) -> tuple[str, tuple[Any, ...]]:
    """`ClaimJobsParams.max_versions` as one condition: a row of a name in it passes while its
    `version` is at most that name's value; rows of other names pass at any version.

    The worker's case, every value equal and every name it claims a key, is the single
    comparison ``version <= ?`` on the row the name filter already reads."""
    if not max_versions:
        return "", ()
    tops = {str(name): int(top) for name, top in max_versions.items()}
    covered = False
    if names is not None:
        wanted = set(names)
        # A name this claim does not take needs no version check.
        tops = {name: top for name, top in tops.items() if name in wanted}
        if not tops:
            return "", ()
        covered = wanted <= tops.keys()
    distinct = set(tops.values())
    if len(distinct) == 1:
        (top,) = distinct
        if covered:
            return "version <= ?", (top,)
        others, keys = _name_filter(list(tops), negate=True)
        return f"(version <= ? OR {others})", (top, *keys)
    by_top: dict[int, list[str]] = {}
    for name, top in tops.items():
        by_top.setdefault(top, []).append(name)
    inline = len(tops) <= _INLINE_NAMES
    arms: list[str] = []
    values: list[Any] = []
    for top, group in sorted(by_top.items()):
        term, bound = _name_filter(group, negate=False, inline=inline)
        arms.append(f"WHEN {term} THEN version <= ?")
        values += [*bound, top]
    return f"(CASE {' '.join(arms)} ELSE 1 END)", tuple(values)


def _check_version(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise JobArgumentsError(f"a job's version must be an integer of at least 1, got {value!r}")
    return value


def _filters(*, queue: str | None = None, status: str | None = None) -> tuple[str, tuple[str, ...]]:
    clauses, params = [], []
    if queue is not None:
        clauses.append("queue = ?")
        params.append(queue)
    if status is not None:
        clauses.append("status = ?")
        params.append(status)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), tuple(params)


def _absolute(target: str) -> Path:
    path = Path(target).expanduser()
    return path if path.is_absolute() else Path.cwd() / path


def _check_busy_timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < float(value) < 86_400:
        raise ValueError(f"busy_timeout must be a number of seconds greater than 0, got {value!r}")
    return float(value)


def _check_bool(option: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{option} must be True or False, got {value!r}")
    return value


def _from_query(name: str, text: str) -> Any:
    """A URL query parameter as the keyword option of the same name takes it."""
    if name == "busy_timeout":
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"busy_timeout expects a number of seconds, got {text!r}") from None
    if name == "create_if_missing":
        return parse_bool(name, text)
    return text


def _check_synchronous(value: object) -> Synchronous:
    lowered = value.lower() if isinstance(value, str) else None
    if lowered not in _SYNCHRONOUS:
        raise ValueError(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got {value!r}")
    return lowered
