"""`PostgresBackend`: the Soniq queue in PostgreSQL, on an asyncpg pool.

Claims use ``FOR UPDATE SKIP LOCKED`` in one statement; every write about a
claimed row is fenced by ``status = 'processing' AND worker_id = <caller>``;
wake-ups travel over LISTEN/NOTIFY on one dedicated connection per backend,
with a plain sleep as the fallback (``listen=False``, or behind PgBouncer in
transaction mode without a direct ``listen_url``). Job changes
share that connection on a second channel. Dependencies live in
`soniq_postgres.dependencies`, the limited claim in `soniq_postgres.limits`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

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
    JobStatus,
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
from soniq.backend.event_loops import EventLoopBinding
from soniq.errors import JobArgumentsError, SoniqError
from soniq_postgres import (
    dependencies,
    key_rotation,
    legacy_010,
    limits,
    migrations,
    pooling,
    reads,
    schedules,
    schema_setup,
)
from soniq_postgres.connection import is_connection_fault, open_connection, open_pool, translated
from soniq_postgres.listener import NotificationListener
from soniq_postgres.options import DEFAULT_SCHEMA, PostgresOptions, parse_options, quote_ident
from soniq_postgres.queries import Queries, dead_letter_conditions, version_bound
from soniq_postgres.rows import (
    affected,
    claim_order,
    dead_letter_record,
    debounce_deadlines,
    job_arrays,
    job_record,
    optional_json,
    to_json,
    utc,
    window_arrays,
    worker_record,
)
from soniq_postgres.stale import StaleSql, find_stale_jobs, rescue_jobs

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

log = logging.getLogger("soniq_postgres")

# A worker's connections beyond one per slot: one claiming, one for
# heartbeats and recovery (so they never queue behind job results).
WORKER_EXTRA_CONNECTIONS = 2


def required_pool_size(concurrency: int) -> int:
    """Connections a worker with `concurrency` slots needs from the pool.

    Prefetched rows hold no connection, so `prefetch` does not count.
    """
    return concurrency + WORKER_EXTRA_CONNECTIONS


COPY_THRESHOLD = 200
"""From this many jobs on, enqueue_jobs uses COPY rather than one INSERT over arrays."""
COPY_COLUMNS = (
    "id",
    "job_name",
    "args",
    "status",
    "attempts",
    "max_attempts",
    "queue",
    "priority",
    "scheduled_at",
    "created_at",
    "updated_at",
    "trace_context",
    "limit_key",
    "producer_id",
    "version",
)


class PostgresBackend:
    """The PostgreSQL backend. Build with `PostgresBackend.from_url`."""

    def __init__(self, options: PostgresOptions) -> None:
        self._options = options
        self._queries = Queries(options.schema)
        self._stale_sql = StaleSql(self._queries)
        self._schedule_sql = schedules.ScheduleSql(options.schema)
        self._dependency_sql = dependencies.DependencySql(self._queries)
        self._limit_sql = limits.LimitSql(self._queries)
        self._key_rotation_sql = key_rotation.KeyRotationSql(options.schema)
        # Built on first use: (queue kind, by name, excluding queues, version filter kind).
        self._claim_sql: dict[tuple[int | None, bool, bool, str | None], str] = {}
        self._pool: asyncpg.Pool | None = None
        self._pool_size = options.max_size
        self._schema_ready = False
        self._connect_lock = asyncio.Lock()
        self._loop = EventLoopBinding()
        self._listener: NotificationListener | None = None
        # Notification counter as of the last claim: lets `wait_for_jobs`
        # return at once when a job arrived between an empty claim and the wait.
        self._seen_before_claim = 0
        self._pooling_line: str | None = None  # scale-out: set by _resolve_pooling
        self._capabilities = BackendCapabilities(
            roles=ROLES,
            push_wakeup=options.listen,
            transactional_enqueue=True,
            shared_across_processes=True,
            push_job_changes=options.listen,
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresBackend:
        """Parse `url` and the options; opens nothing.

        Options (keyword, or URL query parameter): `namespace` (a schema;
        default ``public``), `min_size`/``pool_min_size`` (default 1),
        `max_size`/``pool_max_size`` (default 10, grown by `prepare_worker`
        when not given), `listen` (default true; false polls instead of
        LISTEN/NOTIFY), `statement_cache_size` (asyncpg's; 0 for PgBouncer
        older than 1.21 in transaction mode), `connect_timeout` (seconds),
        `pooling` (``auto``, ``direct`` or ``transaction``: see
        `soniq_postgres.pooling`), `listen_url` (a direct URL for LISTEN when
        the main one goes through a transaction pooler).
        """
        return cls(parse_options(url, options))

    @property
    def capabilities(self) -> BackendCapabilities:
        return self._capabilities

    @property
    def options(self) -> PostgresOptions:
        return self._options

    @property
    def channel(self) -> str:
        """The NOTIFY channel this backend's namespace uses."""
        return self._options.channel

    def __repr__(self) -> str:
        return f"PostgresBackend({self._options.address}/{self._options.database}, schema={self._options.schema!r})"

    # -- lifecycle ---------------------------------------------------------

    async def connect(self) -> None:
        self._follow_loop()
        async with self._connect_lock:
            if self._pool is None:
                await self._resolve_pooling()
                self._pool = await open_pool(self._options, max_size=self._pool_size)
            if not self._schema_ready:
                await self._migrate(only_if_missing=True)

    async def close(self) -> None:
        self._follow_loop()
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.stop()
        pool, self._pool = self._pool, None
        self._schema_ready = False
        if pool is not None:
            await _close_pool(pool)

    async def setup(self) -> None:
        await self.setup_schema(SetupSchemaParams())

    async def setup_schema(self, params: SetupSchemaParams, /) -> SchemaReport:
        pool = await self._ensure_pool()
        async with translated(self._options), pool.acquire() as conn:
            report = await schema_setup.setup_schema(conn, self._options.schema, params, explicit=True)
        if not params.dry_run:
            self._schema_ready = True
        return report

    async def prepare_worker(self, params: PrepareWorkerParams, /) -> None:
        await self._ensure_pool()
        concurrency = params.concurrency
        needed = required_pool_size(concurrency)
        if self._pool_size < needed:
            if self._options.max_size_explicit:
                raise SoniqError(
                    f"the PostgreSQL pool allows {self._pool_size} connections, but a worker with "
                    f"concurrency={concurrency} needs at least {needed} (one per slot, one for claims, "
                    f"one for heartbeats); raise it to {needed} with ?pool_max_size={needed} in the "
                    f"database URL (or max_size={needed}), or lower concurrency"
                )
            await self._grow_pool(needed)
        self._check_connection_budget(concurrency)
        await self._check_server_room()
        if self._options.listen:
            await self._start_listener(wait=self._options.connect_timeout)

    async def drop_schema(self) -> None:
        pool = await self._ensure_pool()
        schema = quote_ident(self._options.schema)
        async with translated(self._options), pool.acquire() as connection:
            if self._options.schema == DEFAULT_SCHEMA:
                await connection.execute(
                    f"DROP TABLE IF EXISTS {schema}.soniq_jobs, {schema}.soniq_dead_letter_jobs, "
                    f"{schema}.soniq_workers, {schema}.soniq_migrations, {schema}.soniq_schedules, "
                    f"{schema}.soniq_leader, {schema}.soniq_job_dependencies, {schema}.soniq_rate_windows, "
                    f"{schema}.soniq_paused_queues, {schema}.soniq_unique_windows"
                )
            else:
                await connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        self._schema_ready = False

    # -- producers ---------------------------------------------------------

    async def enqueue_jobs(self, params: EnqueueJobsParams, /) -> list[str] | None:
        jobs, connection = params.jobs, params.connection
        if not jobs:
            return []
        queues = sorted({job.queue for job in jobs})
        payload = ",".join(queues)
        if len(payload) > 7000:  # NOTIFY payloads stop at 8000 bytes; empty means "any queue"
            payload = ""
        # Only a dedup key or a unique window needs INSERT ... ON CONFLICT; a producer id (every job
        # of an app whose producer_id is "auto") is one more column of the plain INSERT or COPY.
        keyed = any(job.dedup_key is not None or job.unique_window is not None for job in jobs)
        waiting = any(job.depends_on for job in jobs)
        try:
            if connection is not None:
                await self._ensure_schema()
                # The caller's transaction: NOTIFY is delivered only if it commits.
                async with translated(self._options):
                    if waiting:
                        return await self._insert_waiting(connection, jobs, payload)
                    if keyed:
                        return await self._insert_keyed(connection, jobs, payload)
                    await self._insert(connection, jobs, payload)
                return None
            async with self._connection() as conn:
                if waiting:
                    return await self._insert_waiting(conn, jobs, payload)
                if keyed:
                    return await self._insert_keyed(conn, jobs, payload)
                if len(jobs) >= COPY_THRESHOLD:
                    async with conn.transaction():
                        await self._insert(conn, jobs, payload)
                else:
                    await self._insert(conn, jobs, payload)
            return None
        except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            if not _is_data_error(exc):
                raise
            # asyncpg's message quotes the offending parameter, i.e. the job's
            # arguments; it must not reach logs, spans or error trackers.
            raise JobArgumentsError(
                f"PostgreSQL refused the job's values ({type(exc).__name__}, SQLSTATE "
                f"{getattr(exc, 'sqlstate', None) or 'n/a'}); check the arguments, job name and queue "
                "for NUL characters, lone surrogates or out-of-range numbers"
            ) from None

    async def _insert_waiting(self, conn: Any, jobs: Sequence[NewJob], payload: str) -> list[str]:
        """Jobs with dependencies: validated and linked in one transaction or savepoint."""
        return await dependencies.insert_with_dependencies(
            conn, self._dependency_sql, jobs, wake_channel=self._options.channel, payload=payload
        )

    async def _insert_keyed(self, conn: Any, jobs: Sequence[NewJob], payload: str) -> list[str]:
        """One INSERT ... ON CONFLICT for jobs with dedup keys or unique windows (debounced ones
        move the queued row holding their key); the stored id of each job."""
        args = [
            *job_arrays(jobs),
            [job.dedup_key for job in jobs],
            [job.producer_id for job in jobs],
            self._options.channel,
            payload,
            [job.limit_key for job in jobs],
            [job.version for job in jobs],
            debounce_deadlines(jobs),
        ]
        if any(job.unique_window is not None for job in jobs):
            # One row per window key too, naming who holds it: this job when it was inserted.
            rows = await conn.fetch(self._queries.enqueue_windowed, *args, *window_arrays(jobs))
        else:
            rows = await conn.fetch(self._queries.enqueue_keyed, *args)
        by_key = {row["dedup_key"]: str(row["id"]) for row in rows if row["dedup_key"] is not None}
        by_window = {row["window_key"]: str(row["id"]) for row in rows if row.get("window_key") is not None}
        ids: list[str] = []
        for job in jobs:
            if job.unique_window is not None:
                ids.append(by_window[job.unique_window.key])
            else:
                ids.append(job.id if job.dedup_key is None else by_key[job.dedup_key])
        return ids

    async def _insert(self, conn: Any, jobs: Sequence[NewJob], payload: str) -> None:
        """One statement for a few jobs; COPY plus one NOTIFY for many (the caller holds the transaction)."""
        channel = self._options.channel
        if len(jobs) == 1:
            job = jobs[0]
            await conn.fetchrow(
                self._queries.enqueue_one,
                job.id,
                job.job_name,
                job.args_json or to_json(dict(job.args)),
                job.queue,
                job.priority,
                utc(job.scheduled_at),
                job.max_attempts,
                optional_json(job.trace_context),
                channel,
                payload,
                job.limit_key,
                job.producer_id,
                job.version,
            )
            return
        if len(jobs) < COPY_THRESHOLD:
            await conn.fetchrow(
                self._queries.enqueue,
                *job_arrays(jobs),
                channel,
                payload,
                [job.limit_key for job in jobs],
                [job.producer_id for job in jobs],
                [job.version for job in jobs],
            )
            return
        # created_at rises by a microsecond per row so that claim order keeps the list's order.
        created = datetime.now(UTC)
        step = timedelta(microseconds=1)
        records = []
        for job in jobs:
            scheduled = job.scheduled_at
            records.append(
                (
                    job.id,
                    job.job_name,
                    job.args_json or to_json(dict(job.args)),
                    "queued",
                    0,
                    job.max_attempts,
                    job.queue,
                    job.priority,
                    scheduled if scheduled.tzinfo is UTC else utc(scheduled),
                    created,
                    created,
                    None if job.trace_context is None else optional_json(job.trace_context),
                    job.limit_key,
                    job.producer_id,
                    job.version,
                )
            )
            created += step
        await conn.copy_records_to_table(
            "soniq_jobs", schema_name=self._queries.schema, columns=COPY_COLUMNS, records=records
        )
        await conn.execute(self._queries.notify, channel, payload)

    async def get_job(self, params: GetJobParams, /) -> JobRecord | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(self._queries.get_job, params.job_id)
        return None if row is None else job_record(row)

    async def cancel_job(self, params: CancelJobParams, /) -> bool:
        async with self._connection() as conn:
            written = await self._settle(conn, self._queries.cancel, params.job_id, ended=dependencies.CANCELLED)
        return bool(written)

    # -- the claim path ----------------------------------------------------

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        queues, limit = params.queues, params.limit
        excluded = params.excluded_queues
        if excluded and queues is not None:
            # Paused queues of a named claim are dropped here: the statement stays the plain one.
            paused = set(excluded)
            queues = [queue for queue in queues if queue not in paused]
        if limit <= 0 or (queues is not None and not queues):
            return []
        if self._listener is not None:
            self._seen_before_claim = self._listener.sequence_for(queues)
        names = params.job_names
        if names is not None and not names:
            return []
        if params.limits:
            async with self._connection() as conn:
                rows = await limits.claim_limited(
                    conn, self._limit_sql, self._options.schema, dataclasses.replace(params, queues=queues)
                )
            return sorted(rows, key=claim_order)
        by_name = names is not None
        args: tuple[Any, ...]
        kind: int | None
        if queues is None:
            kind, args = None, ()
        elif len(queues) == 1:
            kind, args = 1, (queues[0],)
        else:
            kind, args = 2, (list(queues),)
        if names is not None:
            args = (*args, list(names))
        excluding = bool(excluded) and queues is None
        if excluding:
            args = (*args, list(excluded))
        versions, bound = version_bound(params.max_versions, names)
        args = (*args, *bound)
        key = (kind, by_name, excluding, versions)
        sql = self._claim_sql.get(key)
        if sql is None:
            sql = self._claim_sql[key] = self._queries.claim(
                queue_count=kind, by_name=by_name, excluded=excluding, versions=versions
            )
        async with self._connection() as conn:
            rows = await conn.fetch(sql, params.worker_id, limit, params.mark_started, *args)
        return sorted((job_record(row) for row in rows), key=claim_order)

    # -- cancelling running jobs, waiting for jobs ----------------

    async def request_cancel(self, params: RequestCancelParams, /) -> CancelOutcome:
        job_id = params.job_id
        async with self._connection() as conn, conn.transaction():
            row = await conn.fetchrow(self._queries.request_cancel, job_id, self._options.changes_channel)
            if row is not None:
                if row["status"] == JobStatus.PROCESSING.value:
                    return CancelOutcome.REQUESTED
                if row["has_dependents"]:
                    await self._resolve(conn, [(job_id, dependencies.CANCELLED)])
                return CancelOutcome.CANCELLED
            found = await conn.fetchrow(self._queries.finished_status, job_id)
        assert found is not None
        if found["status"] is not None or found["dead"]:
            return CancelOutcome.ALREADY_FINISHED
        return CancelOutcome.NOT_FOUND

    async def cancel_requests(self, params: CancelRequestsParams, /) -> set[str]:
        async with self._connection() as conn:
            rows = await conn.fetch(self._queries.cancel_requests, params.worker_id)
        return {row["id"] for row in rows}

    async def finish_cancel(self, params: FinishCancelParams, /) -> bool:
        async with self._connection() as conn:
            written = await self._settle(
                conn,
                self._queries.finish_cancel,
                params.job_id,
                params.worker_id,
                params.message,
                ended=dependencies.CANCELLED,
            )
        return bool(written)

    async def watch_jobs(self, params: WatchJobsParams, /) -> None:
        # Without a listener nobody could hear the change: marking rows would only cost writes.
        if not params.job_ids or not self._options.listen:
            return
        async with self._connection() as conn:
            await conn.execute(self._queries.watch, list(params.job_ids))

    async def wait_for_job_changes(self, params: WaitForJobChangesParams, /) -> set[str] | None:
        timeout = max(params.timeout, 0.0)
        if not self._options.listen:
            await asyncio.sleep(timeout)
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        listener = await self._start_listener(wait=timeout)
        changed = await listener.wait_changes(params.job_ids, timeout=max(deadline - loop.time(), 0.0))
        if not changed and not listener.connected:
            return None  # LISTEN was down: changes may have been missed
        return changed

    async def _resolve(self, conn: asyncpg.Connection, settled: Sequence[tuple[str, str | None]]) -> None:
        await dependencies.resolve(
            conn,
            self._dependency_sql,
            settled,
            wake_channel=self._options.channel,
            changes_channel=self._options.changes_channel,
        )

    async def mark_started(self, params: MarkStartedParams, /) -> set[str]:
        if not params.job_ids:
            return set()
        async with self._connection() as conn:
            rows = await conn.fetch(self._queries.mark_started, list(params.job_ids), params.worker_id)
        return {row["id"] for row in rows}

    async def complete_jobs(self, params: CompleteJobsParams, /) -> set[str]:
        results = params.results
        if not results:
            return set()
        doomed = [result.job_id for result in results if result.delete_row]
        if doomed:
            # result_ttl = 0: the fenced delete stands in for the completion write.
            async with self._connection() as conn:
                deleted = await self._complete(
                    conn,
                    self._queries.complete_deleting_guarded,
                    self._queries.complete_deleting,
                    doomed,
                    params.worker_id,
                )
            rest = [result for result in results if not result.delete_row]
            if not rest:
                return deleted
            return deleted | await self.complete_jobs(CompleteJobsParams(worker_id=params.worker_id, results=rest))
        # A result that cannot be encoded is left out (not reported as written,
        # so core settles that row); it never costs the rest of the batch.
        ids: list[str] = []
        payloads: list[str] = []
        expiries: list[datetime | None] = []
        for result in results:
            payload = _encoded_result(result.result)
            if payload is not None:
                ids.append(result.job_id)
                payloads.append(payload)
                expiries.append(None if result.expires_at is None else utc(result.expires_at))
        if not ids:
            return set()
        async with self._connection() as conn:
            try:
                return await self._complete(
                    conn,
                    self._queries.complete_many_guarded,
                    self._queries.complete_many,
                    ids,
                    params.worker_id,
                    payloads,
                    expiries,
                )
            except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                if is_connection_fault(exc):
                    raise
                return await self._complete_one_by_one(conn, params.worker_id, ids, payloads, expiries)

    async def _complete(
        self, conn: asyncpg.Connection, guarded: str, full: str, ids: list[str], worker_id: str, *rest: list[Any]
    ) -> set[str]:
        """One statement for the rows nobody depends on; the rows it left (with dependents, or lost
        by this worker) again, in a transaction that resolves their dependents."""
        changes = self._options.changes_channel
        rows = await conn.fetch(guarded, ids, worker_id, *rest, changes)
        written = {row["id"] for row in rows}
        if len(written) == len(ids):
            return written
        left = [index for index, job_id in enumerate(ids) if job_id not in written]
        more = await self._settle(
            conn,
            full,
            [ids[index] for index in left],
            worker_id,
            *([column[index] for index in left] for column in rest),
            ended=None,
        )
        return written | set(more)

    async def _settle(self, conn: asyncpg.Connection, statement: str, *args: Any, ended: str | None) -> list[str]:
        """A terminal write and the resolution of its rows' dependents, in one transaction."""
        return await dependencies.settle(
            conn,
            self._dependency_sql,
            statement,
            *args,
            self._options.changes_channel,
            ended=ended,
            wake_channel=self._options.channel,
            changes_channel=self._options.changes_channel,
        )

    async def _complete_one_by_one(
        self,
        conn: asyncpg.Connection,
        worker_id: str,
        ids: list[str],
        payloads: list[str],
        expiries: list[datetime | None],
    ) -> set[str]:
        """The batch statement failed for a reason other than the connection: find
        the rows the store accepts; each bad one stays `processing` for core to settle."""
        written: set[str] = set()
        for job_id, payload, expires_at in zip(ids, payloads, expiries, strict=True):
            try:
                rows = await self._settle(
                    conn, self._queries.complete_many, [job_id], worker_id, [payload], [expires_at], ended=None
                )
            except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                if is_connection_fault(exc):
                    raise
                continue
            written.update(rows)
        return written

    async def retry_job(self, params: RetryJobParams, /) -> bool:
        return await self._fenced(
            self._queries.retry, params.job_id, params.worker_id, params.error, utc(params.scheduled_at)
        )

    async def snooze_job(self, params: SnoozeJobParams, /) -> bool:
        return await self._fenced(self._queries.snooze, params.job_id, params.worker_id, utc(params.scheduled_at))

    async def dead_letter_job(self, params: DeadLetterJobParams, /) -> bool:
        reason = str(getattr(params.reason, "value", params.reason))
        async with self._connection() as conn:
            moved = await self._settle(
                conn,
                self._queries.dead_letter,
                params.job_id,
                params.worker_id,
                params.error,
                reason,
                ended=dependencies.DEAD_LETTERED,
            )
        return bool(moved)

    async def nack_job(self, params: NackJobParams, /) -> bool:
        return await self._fenced(self._queries.nack, params.job_id, params.worker_id, params.handler_started)

    # -- steps and checkpoints (JobStepStore) --------------------------------

    async def save_step(self, params: SaveStepParams, /) -> bool:
        return await self._fenced(
            self._queries.save_step, params.job_id, params.worker_id, params.name, params.value_json
        )

    async def save_checkpoint(self, params: SaveCheckpointParams, /) -> bool:
        return await self._fenced(self._queries.save_checkpoint, params.job_id, params.worker_id, params.value_json)

    # -- progress and logs (JobProgressStore, JobLogStore) ---------------------

    async def save_progress(self, params: SaveProgressParams, /) -> bool:
        return await self._fenced(self._queries.save_progress, params.job_id, params.worker_id, params.progress_json)

    async def save_job_logs(self, params: SaveJobLogsParams, /) -> bool:
        return await self._fenced(self._queries.save_job_logs, params.job_id, params.worker_id, params.logs_json)

    async def get_job_logs(self, params: GetJobLogsParams, /) -> str | None:
        async with self._connection() as conn:
            logs: str | None = await conn.fetchval(self._queries.get_job_logs, params.job_id)
        return logs

    # -- queue pauses (QueuePauseStore) --------------------------------------

    async def pause_queue(self, params: PauseQueueParams, /) -> bool:
        async with self._connection() as conn:
            return bool(await conn.fetchval(self._queries.pause_queue, params.queue, params.reason))

    async def resume_queue(self, params: ResumeQueueParams, /) -> bool:
        # The same statement tells waiting workers, so they claim from the queue at once.
        async with self._connection() as conn:
            row = await conn.fetchrow(self._queries.resume_queue, params.queue, self._options.channel)
        return row is not None

    async def paused_queues(self) -> list[PausedQueue]:
        async with self._connection() as conn:
            rows = await conn.fetch(self._queries.paused_queues)
        return [PausedQueue(queue=row["queue"], reason=row["reason"], paused_at=utc(row["paused_at"])) for row in rows]

    async def _fenced(self, sql: str, *args: Any) -> bool:
        async with self._connection() as conn:
            return affected(await conn.execute(sql, *args)) == 1

    # -- workers -----------------------------------------------------------

    async def register_worker(self, params: RegisterWorkerParams, /) -> None:
        worker = params.worker
        queues = None if worker.queues is None else list(worker.queues)
        names = None if worker.job_names is None else to_json(list(worker.job_names))
        versions = None if worker.job_versions is None else to_json(dict(worker.job_versions))
        async with self._connection() as conn:
            await conn.execute(
                self._queries.register_worker,
                worker.id,
                worker.hostname,
                worker.pid,
                queues,
                worker.concurrency,
                names,
                versions,
            )

    async def heartbeat(self, params: HeartbeatParams, /) -> bool:
        async with self._connection() as conn:
            return affected(await conn.execute(self._queries.heartbeat, params.worker_id)) == 1

    async def set_worker_status(self, params: SetWorkerStatusParams, /) -> bool:
        status = WorkerStatus(params.status).value
        async with self._connection() as conn:
            shutdown = optional_json(params.last_shutdown)
            sql, state = self._queries.set_worker_status, params.state
            return affected(await conn.execute(sql, params.worker_id, status, state, shutdown)) == 1

    async def list_workers(self) -> list[WorkerRecord]:
        async with self._connection() as conn:
            rows = await conn.fetch(self._queries.list_workers)
        return [worker_record(row) for row in rows]

    # -- stale recovery ------------------------------------------------------

    async def find_stale_jobs(self, params: FindStaleJobsParams, /) -> StaleScan:
        async with self._connection() as conn:
            return await find_stale_jobs(
                conn,
                schema=self._queries.schema,
                sql=self._stale_sql,
                heartbeat_timeout=float(params.heartbeat_timeout),
            )

    async def rescue_jobs(self, params: RescueJobsParams, /) -> set[str]:
        if not params.rescues:
            return set()
        async with self._connection() as conn, conn.transaction():
            rows = await rescue_jobs(
                conn, sql=self._stale_sql, rescues=params.rescues, changes_channel=self._options.changes_channel
            )
            # Only dead-lettered rows come back flagged: a requeue resolves nothing.
            flagged = [(row["id"], dependencies.DEAD_LETTERED) for row in rows if row["has_dependents"]]
            if flagged:
                await self._resolve(conn, flagged)
        return {row["id"] for row in rows}

    async def expire_unknown_jobs(self, params: ExpireUnknownJobsParams, /) -> set[str]:
        async with self._connection() as conn:
            moved = await self._settle(
                conn,
                self._queries.expire_unknown,
                list(params.known_names),
                max(float(params.older_than), 0.0),
                params.error,
                ended=dependencies.DEAD_LETTERED,
            )
        return set(moved)

    # -- observation -------------------------------------------------------

    async def queue_stats(self, params: QueueStatsParams, /) -> QueueStats:
        queue = params.queue
        async with self._connection() as conn:
            if queue is None:
                row = await conn.fetchrow(self._queries.stats_all)
            else:
                row = await conn.fetchrow(self._queries.stats_queue, queue)
        assert row is not None
        counts = {key: int(row[key]) for key in ("queued", "processing", "done", "cancelled", "dead_letter")}
        return QueueStats(total=sum(counts.values()), **counts)

    async def wait_for_jobs(self, params: WaitForJobsParams, /) -> None:
        queues, timeout = params.queues, params.timeout
        if not self._options.listen:
            await asyncio.sleep(max(timeout, 0.0))
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        listener = await self._start_listener(wait=max(timeout, 0.0))
        latest = listener.sequence_for(queues)
        if latest != self._seen_before_claim:
            self._seen_before_claim = latest
            return
        # While the LISTEN connection is down this is a plain sleep (the
        # listener wakes waiters when it reconnects).
        await listener.wait(queues=queues, timeout=max(deadline - loop.time(), 0.0))
        self._seen_before_claim = listener.sequence_for(queues)

    # -- dead letters ------------------------------------------------------

    async def get_dead_letter(self, params: GetDeadLetterParams, /) -> DeadLetterRecord | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(self._queries.get_dead, params.job_id)
        return None if row is None else dead_letter_record(row)

    async def replay_dead_letter(self, params: ReplayDeadLetterParams, /) -> str | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(
                self._queries.replay_dead,
                params.job_id,
                params.new_job_id,
                utc(params.scheduled_at),
                self._options.channel,
                params.queue,
                params.priority,
                params.max_attempts,
                params.attempts,
            )
        return None if row is None else str(row["id"])

    async def purge_dead_letter(self, params: PurgeDeadLetterParams, /) -> bool:
        async with self._connection() as conn:
            return affected(await conn.execute(self._queries.purge_dead, params.job_id)) == 1

    # -- deleting jobs and bulk dead-letter operations ----

    async def delete_job(self, params: DeleteJobParams, /) -> bool:
        async with self._connection() as conn:
            # The statement reports dependents only for a row that was not yet done.
            gone = await self._settle(conn, self._queries.delete_job, params.job_id, ended=dependencies.DELETED)
        return bool(gone)

    async def delete_dead_letters(self, params: DeleteDeadLettersParams, /) -> set[str]:
        if params.limit <= 0:
            return set()
        conditions, args = dead_letter_conditions(params.filter, first=1)
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        dead = self._queries.dead
        # A bounded batch; rows another deleter holds are left to it.
        sql = f"""
DELETE FROM {dead} WHERE id = ANY(ARRAY(
    SELECT id FROM {dead} {where} ORDER BY moved_to_dead_letter_at, id LIMIT ${len(args) + 1}
    FOR UPDATE SKIP LOCKED
)) RETURNING id"""
        async with self._connection() as conn:
            rows = await conn.fetch(sql, *args, params.limit)
        return {row["id"] for row in rows}

    async def dead_letter_stats(self, params: DeadLetterStatsParams, /) -> DeadLetterStats:
        conditions, args = dead_letter_conditions(params.filter, first=1)
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""

        def grouped(column: str) -> str:
            return (
                f"(SELECT json_object_agg(g.k, g.c)::text FROM (SELECT {column} AS k, count(*) AS c "
                f"FROM d GROUP BY {column}) AS g)"
            )

        sql = f"""
WITH d AS (
    SELECT job_name, queue, dead_letter_reason, resurrection_count, moved_to_dead_letter_at
    FROM {self._queries.dead} {where}
)
SELECT (SELECT count(*) FROM d) AS total,
       (SELECT count(*) FROM d WHERE resurrection_count > 0) AS resurrected,
       (SELECT min(moved_to_dead_letter_at) FROM d) AS oldest,
       (SELECT max(moved_to_dead_letter_at) FROM d) AS newest,
       {grouped("job_name")} AS by_job_name,
       {grouped("queue")} AS by_queue,
       {grouped("dead_letter_reason")} AS by_reason"""
        async with self._connection() as conn:
            row = await conn.fetchrow(sql, *args)
        assert row is not None

        def counts(text: str | None) -> dict[str, int]:
            return {str(key): int(value) for key, value in json.loads(text).items()} if text else {}

        return DeadLetterStats(
            total=int(row["total"]),
            by_job_name=counts(row["by_job_name"]),
            by_queue=counts(row["by_queue"]),
            by_reason=counts(row["by_reason"]),
            resurrected=int(row["resurrected"]),
            oldest_moved_at=None if row["oldest"] is None else utc(row["oldest"]),
            newest_moved_at=None if row["newest"] is None else utc(row["newest"]),
        )

    # -- dashboard reads (soniq_postgres.reads) ------------------------------

    async def job_counts(self, params: JobCountsParams, /) -> list[QueueCounts]:
        async with self._connection() as conn:
            return await reads.job_counts(conn, quote_ident(self._queries.schema), params)

    async def job_activity(self, params: JobActivityParams, /) -> list[ActivityBucket]:
        async with self._connection() as conn:
            return await reads.job_activity(conn, quote_ident(self._queries.schema), params)

    async def job_page(self, params: JobPageParams, /) -> JobPage:
        async with self._connection() as conn:
            return await reads.job_page(conn, quote_ident(self._queries.schema), params)

    async def dead_letter_page(self, params: DeadLetterPageParams, /) -> DeadLetterPage:
        async with self._connection() as conn:
            return await reads.dead_letter_page(conn, quote_ident(self._queries.schema), params)

    async def queue_names(self) -> list[str]:
        async with self._connection() as conn:
            return await reads.queue_names(conn, quote_ident(self._queries.schema))

    # -- schema status --

    async def schema_status(self) -> SchemaStatus:
        # The pool only: connect() would apply missing migrations, and this must report them instead.
        pool = await self._ensure_pool()
        schema = self._options.schema
        async with translated(self._options), pool.acquire() as conn:
            # a 0.1.0 or unknown schema's soniq_migrations rows are not our steps.
            family, _ = await legacy_010.detect(conn, schema, migrations.LATEST_VERSION)
            table = await conn.fetchval("SELECT to_regclass($1)", f"{quote_ident(schema)}.soniq_migrations")
            rows = (
                await conn.fetch(f"SELECT version, name, applied_at FROM {quote_ident(schema)}.soniq_migrations")
                if table is not None and family.value in ("soniq", "newer")
                else []
            )
        applied = {
            int(row["version"]): MigrationStep(int(row["version"]), row["name"], row["applied_at"]) for row in rows
        }
        known = {m.version for m in migrations.MIGRATIONS}
        return SchemaStatus(
            backend="postgresql",
            location=f"{self._options.address}/{self._options.database}, schema {schema}",
            applied=tuple(applied[v] for v in sorted(applied)),
            pending=tuple(MigrationStep(m.version, m.name) for m in migrations.MIGRATIONS if m.version not in applied),
            newer_than_known=bool(set(applied) - known),
            details={"schema": schema, "family": family.value},
        )

    # -- schedules, leader lease, pruning --

    async def upsert_schedule(self, params: UpsertScheduleParams, /) -> ScheduleRecord:
        async with self._connection() as conn:
            return await schedules.upsert(conn, self._schedule_sql, params)

    async def get_schedule(self, params: GetScheduleParams, /) -> ScheduleRecord | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(self._schedule_sql.get, params.name)
        return None if row is None else schedules.schedule_record(row)

    async def list_schedules(self, params: ListSchedulesParams, /) -> list[ScheduleRecord]:
        async with self._connection() as conn:
            if params.names is None:
                rows = await conn.fetch(self._schedule_sql.list_all)
            else:
                rows = await conn.fetch(self._schedule_sql.list_named, list(params.names))
        return [schedules.schedule_record(row) for row in rows]

    async def set_schedule_paused(self, params: SetSchedulePausedParams, /) -> bool:
        async with self._connection() as conn:
            return await schedules.set_paused(conn, self._schedule_sql, params)

    async def remove_schedule(self, params: RemoveScheduleParams, /) -> bool:
        async with self._connection() as conn:
            return affected(await conn.execute(self._schedule_sql.remove, params.name)) == 1

    async def due_schedules(self, params: DueSchedulesParams, /) -> list[ScheduleRecord]:
        async with self._connection() as conn:
            return await schedules.due(conn, self._schedule_sql, params)

    async def fire_schedule(self, params: FireScheduleParams, /) -> list[str] | None:
        jobs = list(params.jobs)
        payload = ",".join(sorted({job.queue for job in jobs}))
        if len(payload) > 7000:  # as in enqueue_jobs: an empty payload wakes every queue
            payload = ""
        async with self._connection() as conn, conn.transaction():
            advanced = await conn.fetchval(
                self._schedule_sql.advance,
                params.name,
                utc(params.expected_next_run),
                utc(params.new_next_run),
                len(jobs),
                utc(params.fired_at),
                jobs[-1].id if jobs else None,
            )
            if advanced is None:
                return None
            if jobs:
                await self._insert(conn, jobs, payload)
        return [job.id for job in jobs]

    async def acquire_lease(self, params: AcquireLeaseParams, /) -> LeaseRecord | None:
        async with self._connection() as conn:
            return await schedules.acquire(conn, self._schedule_sql, params)

    async def release_lease(self, params: ReleaseLeaseParams, /) -> bool:
        async with self._connection() as conn:
            return await schedules.release(conn, self._schedule_sql, params)

    async def get_lease(self, params: GetLeaseParams, /) -> LeaseRecord | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(self._schedule_sql.get_lease, params.name)
        return None if row is None else schedules.lease_record(row)

    async def prune_jobs(self, params: PruneJobsParams, /) -> int:
        async with self._connection() as conn:
            return await schedules.prune_jobs(conn, self._schedule_sql, params)

    async def prune_dead_letters(self, params: PruneDeadLettersParams, /) -> int:
        async with self._connection() as conn:
            return await schedules.prune_dead_letters(conn, self._schedule_sql, params)

    # -- key rotation ------------------------------------------------------

    async def sealed_rows(self, params: SealedRowsParams, /) -> SealedRowPage:
        async with self._connection() as conn:
            return await key_rotation.sealed_rows(conn, self._key_rotation_sql, params)

    async def reseal_row(self, params: ResealRowParams, /) -> bool:
        async with self._connection() as conn:
            return await key_rotation.reseal_row(conn, self._key_rotation_sql, params)

    # -- internals ---------------------------------------------------------

    def _follow_loop(self) -> None:
        """Start afresh when called from another event loop than the pool's (see
        `EventLoopBinding`): the old pool and listener are dropped unawaited."""
        if not self._loop.moved():
            return
        pool, self._pool = self._pool, None
        self._listener = None
        self._connect_lock = asyncio.Lock()
        self._schema_ready = False
        self._seen_before_claim = 0
        if pool is not None:
            _abandon_pool(pool)

    async def _ensure_pool(self) -> asyncpg.Pool:
        self._follow_loop()
        if self._pool is None:
            async with self._connect_lock:
                if self._pool is None:
                    await self._resolve_pooling()
                    self._pool = await open_pool(self._options, max_size=self._pool_size)
        return self._pool

    async def _ensure_schema(self) -> None:
        if not self._schema_ready:
            await self._ensure_pool()
            await self._migrate(only_if_missing=True)

    async def _migrate(self, *, only_if_missing: bool) -> None:
        assert self._pool is not None
        async with translated(self._options), self._pool.acquire() as conn:
            if not (only_if_missing and await migrations.is_current(conn, self._options.schema)):
                await schema_setup.setup_schema(
                    conn, self._options.schema, SetupSchemaParams(), explicit=not only_if_missing
                )
        self._schema_ready = True

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A pool connection, with lost connections raised as `BackendUnavailableError`.

        asyncpg discards a broken connection when it is released, so the next
        call gets a fresh one: the pool recovers without help.
        """
        self._follow_loop()
        if not self._schema_ready:
            await self._ensure_schema()
        pool = self._pool
        assert pool is not None
        async with translated(self._options), pool.acquire() as conn:
            try:
                yield conn
            except Exception as exc:
                if is_connection_fault(exc) and not conn.is_closed():
                    # Do not hand a half-broken connection back to the pool.
                    conn.terminate()
                raise

    async def _grow_pool(self, size: int) -> None:
        async with self._connect_lock:
            old = self._pool
            self._pool = await open_pool(self._options, max_size=size)
            self._pool_size = size
        if old is not None:
            await _close_pool(old)

    async def _start_listener(self, *, wait: float) -> NotificationListener:
        if self._listener is None:
            options = self._options

            async def connect() -> asyncpg.Connection:
                return await open_connection(
                    options, application_name=options.listen_application_name, dsn=options.listen_dsn
                )

            self._listener = NotificationListener(
                connect=connect, channel=options.channel, changes_channel=options.changes_channel
            )
        await self._listener.start(wait=wait)
        return self._listener

    # -- scale-out: poolers and the connection budget ----------------------

    async def _resolve_pooling(self) -> None:
        """Once per backend, before the first pool: what sits in front of PostgreSQL."""
        if self._pooling_line is not None:
            return
        self._options, self._pooling_line = await pooling.resolve(self._options)
        self._capabilities = dataclasses.replace(
            self._capabilities, push_wakeup=self._options.listen, push_job_changes=self._options.listen
        )

    @property
    def connection_budget(self) -> int:
        """Connections this backend may hold: its pool, plus one LISTEN connection."""
        return self._pool_size + (1 if self._options.listen else 0)

    def _check_connection_budget(self, concurrency: int) -> None:
        log.info(
            "%s; connection budget %d (pool of %d for concurrency=%d%s)",
            self._pooling_line or f"PostgreSQL at {self._options.address}",
            self.connection_budget,
            self._pool_size,
            concurrency,
            ", one LISTEN connection" if self._options.listen else "",
        )

    async def _check_server_room(self) -> None:
        """Refuse a budget the server can never grant (direct connections only: a pooler's
        clients do not count against max_connections)."""
        if self._options.transaction_pooled or self._pool is None:
            return
        async with translated(self._options), self._pool.acquire() as conn:
            limit, in_use = await conn.fetchrow(
                "SELECT current_setting('max_connections')::int - "
                "current_setting('superuser_reserved_connections')::int, "
                "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
            )
        budget = self.connection_budget
        if budget > limit:
            raise SoniqError(
                f"a worker with this pool needs up to {budget} connections to PostgreSQL at "
                f"{self._options.address}, but the server allows {limit} (max_connections less "
                "superuser_reserved_connections); lower concurrency or pool_max_size, or put PgBouncer "
                "in transaction mode in front (see docs/scaling.md)"
            )
        if budget > limit - in_use + 1:
            log.warning(
                "PostgreSQL at %s has %d free connections and this worker may use up to %d; "
                "a fleet of workers will run out (see docs/scaling.md: connection budgets)",
                self._options.address,
                limit - in_use,
                budget,
            )


def _encoded_result(value: Any) -> str | None:
    """The result as JSON text the server will accept, or None when it cannot be."""
    try:
        text = to_json(value)
        # asyncpg sends UTF-8; a lone surrogate would fail the whole statement there.
        text.encode("utf-8")
    except (TypeError, ValueError, RecursionError):
        return None
    return text


def _is_data_error(exc: BaseException) -> bool:
    """A value the server (SQLSTATE class 22) or asyncpg's encoder (a ValueError) refused."""
    if isinstance(exc, asyncpg.DataError):
        return True
    return isinstance(exc, asyncpg.InterfaceError) and isinstance(exc, ValueError)


def _abandon_pool(pool: asyncpg.Pool) -> None:
    """Let go of a pool whose loop is gone: terminating may fail on the closed loop,
    and then the sockets close when the garbage collector finalises their transports."""
    try:
        pool.terminate()
    except RuntimeError:
        pass


async def _close_pool(pool: asyncpg.Pool) -> None:
    try:
        await asyncio.wait_for(pool.close(), 10.0)
    except (TimeoutError, Exception):
        pool.terminate()
