"""`RedisBackend`: Soniq's queue in Redis, every state change one Lua script.

Rows are hashes (``job:<id>``, ``dead:<id>``, ``worker:<id>``). Due rows wait
in a per-queue ready set whose members sort by priority, scheduled time,
creation time and id; rows scheduled for later wait in a per-queue sorted set
by time and are promoted by the claim script once due. Per-status and
per-queue sorted sets (scored by creation time) serve listings and counts; a
set per worker holds the rows it is processing. See ``docs/backends/redis.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from redis.asyncio import Redis

from soniq.backend import (
    AcquireLeaseParams,
    ActivityBucket,
    BackendCapabilities,
    CancelJobParams,
    CancelOutcome,
    CancelRequestsParams,
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterFilter,
    DeadLetterJobParams,
    DeadLetterPage,
    DeadLetterPageParams,
    DeadLetterReason,
    DeadLetterRecord,
    DeadLetterStats,
    DeadLetterStatsParams,
    DeleteDeadLettersParams,
    DeleteJobParams,
    DependencyPolicy,
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
    GroupLimit,
    HeartbeatParams,
    JobActivityParams,
    JobCountsParams,
    JobPage,
    JobPageParams,
    JobRecord,
    JobStatus,
    LeaseRecord,
    LimitScope,
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
    Rescue,
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
    UniqueWindow,
    UpsertScheduleParams,
    WaitForJobChangesParams,
    WaitForJobsParams,
    WatchJobsParams,
    WorkerRecord,
    WorkerStatus,
    check_group_limit,
)
from soniq.backend.event_loops import EventLoopBinding
from soniq.errors import SoniqError
from soniq_redis import key_rotation, reads, schedules
from soniq_redis.cluster import check_mode
from soniq_redis.connection import RedisTarget, translated_errors
from soniq_redis.keys import KeySpace
from soniq_redis.rows import (
    dead_letter_record,
    dumps,
    from_micros,
    job_record,
    pairs,
    paused_queue,
    text_map,
    to_micros,
    worker_record,
)
from soniq_redis.scripts import Scripts
from soniq_redis.wakeup import WakeupListener

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

SCHEMA_VERSION = 1
# Still 1 with the job fields `shutdown_nacks`, `version`, `steps`, `checkpoint`, `progress` and
# `logs` (also on the dead-letter hash) and the `paused_queues` hash: a row written without them
# reads as 0, 1, {}, None, None and no logs, so a keyspace written by an older soniq-redis needs
# no upgrade step (and older workers may share it). Likewise the job field `debounce_deadline`
# (absent: not debounced) and the `window:<key>` hashes (UniqueWindows; none before).
# Ready-set members carry the priority in 16 fixed-width digits.
PRIORITY_LIMIT = 10**15
_SCAN_BATCH = 500
# How long one sweeper may hold the sweep between its find and its rescue
# before another may take over (a sweeper that died in between loses nothing:
# its workers stay stopped and their rows are found again).
SWEEP_LOCK_MS = 2_000


def _queue_args(queues: Sequence[str] | None) -> list[str]:
    if queues is None:
        return ["1"]
    return ["0", *dict.fromkeys(queues)]


def _name_args(job_names: Sequence[str] | None) -> list[str | int]:
    if job_names is None:
        return [-1]
    names = list(dict.fromkeys(job_names))
    return [len(names), *names]


def _claim_filter_args(params: ClaimJobsParams) -> list[str | int]:
    """The excluded (paused) queues and the per-name maximum versions, as `claim_arguments`
    in common.lua reads them; with neither, three short arguments and no extra work."""
    excluded = list(dict.fromkeys(params.excluded_queues))
    args: list[str | int] = [len(excluded), *excluded]
    versions = params.max_versions
    if not versions:
        return [*args, 0, ""]
    maxima = set(versions.values())
    if len(maxima) == 1:
        # One shared maximum: one number for every name.
        return [*args, len(versions), int(maxima.pop()), *versions]
    args += [len(versions), ""]
    for name, max_version in versions.items():
        args += [name, int(max_version)]
    return args


_EXTRAS = 10
"""How many extras `enqueue.lua` reads before a job's dependency ids."""


def _job_extras(job: NewJob) -> list[str | int]:
    """`enqueue.lua`'s per-job extras: a count, then (only when any is set) policy, limit key,
    dependencies as JSON, debounce deadline, unique window, and the dependency ids."""
    policy = DependencyPolicy(job.dependency_policy)
    window, deadline = job.unique_window, job.debounce_deadline
    if (
        policy is DependencyPolicy.CANCEL
        and job.limit_key is None
        and not job.depends_on
        and window is None
        and deadline is None
    ):
        return [0]
    return [
        _EXTRAS + len(job.depends_on),
        policy.value,
        "0" if job.limit_key is None else "1",
        job.limit_key or "",
        dumps(list(job.depends_on)),
        "" if deadline is None else to_micros(deadline),
        *_window_args(window),
        *job.depends_on,
    ]


def _window_args(window: UniqueWindow | None) -> list[str | int]:
    """Has-window, key, starts_at and expires_at (microseconds), and the PEXPIREAT time in
    milliseconds, rounded up so that the key outlives no part of the window."""
    if window is None:
        return ["0", "", "", "", ""]
    expires_us = to_micros(window.expires_at)
    return ["1", window.key, to_micros(window.starts_at), expires_us, -(-expires_us // 1000)]


def _version(job: NewJob) -> int:
    if job.version < 1:
        raise ValueError(f"a job version must be 1 or more, got {job.version} (job {job.id})")
    return job.version


def _limit_args(limits: Sequence[GroupLimit]) -> list[str | int]:
    """`claim_limited.lua`'s limits: a count, then six values per limit."""
    args: list[str | int] = [len(limits)]
    for group in limits:
        # The bounds core enforces at declaration (soniq.limits), so this store refuses nothing core accepts.
        check_group_limit(group)
        period_us = round(group.rate_period * 1_000_000)
        args += [
            LimitScope(group.scope).value,
            group.name,
            "" if group.max_concurrent is None else group.max_concurrent,
            "" if group.rate_limit is None else group.rate_limit,
            period_us,
            "1" if group.partitioned else "0",
        ]
    return args


def _rescue_args(rescue: Rescue) -> list[str | int]:
    action = RescueAction(rescue.action)
    if action is RescueAction.DEAD_LETTER and rescue.reason is None:
        raise ValueError(f"a dead-letter rescue needs a reason (job {rescue.job_id})")
    return [
        rescue.job_id,
        rescue.expected_worker_id,
        to_micros(rescue.expected_updated_at),
        action.value,
        rescue.attempts,
        "0" if rescue.error is None else "1",
        rescue.error or "",
        rescue.reason or "",
    ]


class RedisBackend:
    """The Soniq backend for ``redis://`` and ``rediss://`` URLs."""

    def __init__(self, target: RedisTarget) -> None:
        self._target = target
        self.keys = KeySpace.for_namespace(target.options["namespace"], cluster=target.cluster)
        self._client: Redis | None = None
        self._scripts: Scripts | None = None
        self._wakeups: WakeupListener | None = None
        self._connect_lock = asyncio.Lock()
        self._loop = EventLoopBinding()
        self._claim_generation = 0
        # Names this instance as the holder of the sweep lock between its find and its rescue.
        self._sweeper_token = uuid.uuid4().hex

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisBackend:
        """Parse the URL and options; opens nothing until `connect`."""
        return cls(RedisTarget.parse(url, options))

    def __repr__(self) -> str:
        return f"RedisBackend({self._target.where}/{self._target.db}, prefix={self.keys.prefix!r})"

    @property
    def capabilities(self) -> BackendCapabilities:
        return BackendCapabilities(
            roles=ROLES,
            push_wakeup=True,
            transactional_enqueue=False,
            shared_across_processes=True,
            push_job_changes=True,
        )

    # -- lifecycle -----------------------------------------------------------

    def _leave_other_loop(self) -> None:
        """Forget a client built on another event loop (see `EventLoopBinding`), so the next
        call reconnects here; its sockets are left to the collector."""
        if not self._loop.moved():
            return
        self._client, self._scripts, self._wakeups = None, None, None
        self._connect_lock = asyncio.Lock()

    async def connect(self) -> None:
        self._leave_other_loop()
        async with self._connect_lock:
            if self._client is not None:
                return
            client = self._target.client()
            try:
                with translated_errors(self._target, connecting=True):
                    await client.ping()
                    target = self._target
                    await check_mode(client, cluster=target.cluster, where=target.where, url=target.url)
                    scripts = Scripts(client, self.keys.prefix)
                    await scripts.load_all()
                    await self._ensure_schema(client)
            except BaseException:
                await client.aclose()
                raise
            self._client, self._scripts = client, scripts
            self._wakeups = WakeupListener(client, self.keys.wakeup_channel, self.keys.changes_channel)
            self._claim_generation = 0

    async def close(self) -> None:
        self._leave_other_loop()
        wakeups, client = self._wakeups, self._client
        self._wakeups, self._client, self._scripts = None, None, None
        self._loop.forget()
        if wakeups is not None:
            await wakeups.close()
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()

    async def setup(self) -> None:
        client, _ = await self._ready()
        with translated_errors(self._target):
            await self._ensure_schema(client)

    async def setup_schema(self, params: SetupSchemaParams, /) -> SchemaReport:
        if params.dry_run:
            # Read-only, as schema_status: connect() would write the schema key.
            status = await self.schema_status()
            applied = tuple(step.version for step in status.applied)
            family = "soniq" if applied else "empty"
            pending = tuple(step.version for step in status.pending)
            return SchemaReport(family=family, applied=applied, pending=pending, dry_run=True)
        # A client of its own, before connect() (which writes the marker too): the marker is set
        # with NX, so of several setups racing on an empty prefix exactly one reports creating it.
        self._leave_other_loop()
        own = self._target.client()
        try:
            with translated_errors(self._target, connecting=True):
                stored = await own.get(self.keys.schema)
                created = stored is None and bool(await own.set(self.keys.schema, str(SCHEMA_VERSION), nx=True))
        finally:
            with contextlib.suppress(Exception):
                await own.aclose()
        client, _ = await self._ready()
        with translated_errors(self._target):
            await self._ensure_schema(client)
        family = "empty" if stored is None else "soniq"
        applied = () if stored is None else tuple(range(1, int(stored) + 1))
        pending = tuple(range(1, SCHEMA_VERSION + 1)) if created else ()
        return SchemaReport(family=family, applied=applied, pending=pending)

    async def _ensure_schema(self, client: Redis) -> None:
        stored = await client.get(self.keys.schema)
        if stored is None:
            await client.set(self.keys.schema, str(SCHEMA_VERSION), nx=True)
        elif int(stored) > SCHEMA_VERSION:
            raise SoniqError(
                f"the Redis keys under {self.keys.prefix!r} were written by a newer soniq-redis "
                f"(schema {stored!s}, this one knows {SCHEMA_VERSION}); upgrade soniq-redis"
            )

    async def prepare_worker(self, params: PrepareWorkerParams, /) -> None:
        concurrency, prefetch = params.concurrency, params.prefetch
        limit = self._target.options["max_connections"]
        # Each in-flight row may finish at the same moment, plus the claim loop
        # and heartbeat, plus the pub/sub subscription.
        needed = concurrency + prefetch + 2
        if limit is not None and limit < needed:
            raise SoniqError(
                f"max_connections={limit} is too small for concurrency={concurrency} and "
                f"prefetch={prefetch}: the Redis backend needs at least {needed}; raise max_connections "
                "(or leave it unset)"
            )
        await self._ready()
        assert self._wakeups is not None
        await self._wakeups.start()

    async def drop_schema(self) -> None:
        client, _ = await self._ready()
        with translated_errors(self._target):
            async for batch in self._scan_batches(client):
                if batch:
                    await client.unlink(*batch)

    async def _scan_batches(self, client: Redis) -> AsyncIterator[list[str]]:
        batch: list[str] = []
        async for key in client.scan_iter(match=self.keys.scan_pattern, count=_SCAN_BATCH):
            if self.keys.owns(key):
                batch.append(key)
            if len(batch) >= _SCAN_BATCH:
                yield batch
                batch = []
        yield batch

    async def _ready(self) -> tuple[Redis, Scripts]:
        self._leave_other_loop()
        if self._client is None:
            await self.connect()
        client, scripts = self._client, self._scripts
        if client is None or scripts is None:
            raise SoniqError("the Redis backend was closed while in use")
        return client, scripts

    async def _run(self, name: str, *args: str | int) -> Any:
        _, scripts = await self._ready()
        with translated_errors(self._target):
            return await scripts.run(name, *args)

    # -- producers -------------------------------------------------------------

    async def enqueue_jobs(self, params: EnqueueJobsParams, /) -> list[str] | None:
        jobs = params.jobs
        if params.connection is not None:
            raise SoniqError(
                "the Redis backend cannot join a database transaction (transactional_enqueue is False); "
                "enqueue without connection="
            )
        if not jobs:
            return []
        args: list[str | int] = [JobStatus.QUEUED.value, len(jobs)]
        for job in jobs:
            if not -PRIORITY_LIMIT < job.priority < PRIORITY_LIMIT:
                raise ValueError(f"priority must be between -{PRIORITY_LIMIT} and {PRIORITY_LIMIT}, got {job.priority}")
            args += [
                job.id,
                job.job_name,
                dumps(dict(job.args)),
                job.queue,
                job.priority,
                to_micros(job.scheduled_at),
                job.max_attempts,
                "" if job.trace_context is None else dumps(dict(job.trace_context)),
                job.dedup_key or "",
                job.producer_id or "",
                _version(job),
                *_job_extras(job),
            ]
        stored = await self._run("enqueue", *args)
        return [str(job_id) for job_id in stored]

    async def get_job(self, params: GetJobParams, /) -> JobRecord | None:
        client, _ = await self._ready()
        with translated_errors(self._target):
            fields = await client.hgetall(self.keys.job(params.job_id))
        return job_record(text_map(fields)) if fields else None

    async def cancel_job(self, params: CancelJobParams, /) -> bool:
        return bool(await self._run("cancel", JobStatus.CANCELLED.value, params.job_id))

    # -- the claim path ----------------------------------------------------------

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        queues, limit = params.queues, params.limit
        if limit <= 0 or (queues is not None and not queues):
            return []
        if params.job_names is not None and not params.job_names:
            return []
        self._leave_other_loop()
        if self._wakeups is not None:
            # Read before claiming: a wake-up that lands while we claim must
            # still cut the next wait short.
            self._claim_generation = self._wakeups.generation
        common: list[str | int] = [
            JobStatus.PROCESSING.value,
            params.worker_id,
            limit,
            "1" if params.mark_started else "0",
            *_name_args(params.job_names),
            *_claim_filter_args(params),
        ]
        if params.limits:
            rows = await self._run("claim_limited", *common, *_limit_args(params.limits), *_queue_args(queues))
        else:
            rows = await self._run("claim", *common, *_queue_args(queues))
        return [job_record(pairs(row)) for row in rows]

    async def mark_started(self, params: MarkStartedParams, /) -> set[str]:
        if not params.job_ids:
            return set()
        written = await self._run("mark_started", params.worker_id, *params.job_ids)
        return {str(job_id) for job_id in written}

    async def complete_jobs(self, params: CompleteJobsParams, /) -> set[str]:
        if not params.results:
            return set()
        pairs_args: list[str | int] = []
        for item in params.results:
            expires: str | int = "" if item.expires_at is None else to_micros(item.expires_at)
            if item.delete_row:
                expires = "delete"
            pairs_args += [item.job_id, dumps(item.result), expires]
        written = await self._run("complete", JobStatus.DONE.value, params.worker_id, *pairs_args)
        return {str(job_id) for job_id in written}

    async def retry_job(self, params: RetryJobParams, /) -> bool:
        scheduled_at = to_micros(params.scheduled_at)
        return bool(await self._run("requeue", "retry", params.job_id, params.worker_id, scheduled_at, params.error))

    async def snooze_job(self, params: SnoozeJobParams, /) -> bool:
        scheduled_at = to_micros(params.scheduled_at)
        return bool(await self._run("requeue", "snooze", params.job_id, params.worker_id, scheduled_at))

    async def dead_letter_job(self, params: DeadLetterJobParams, /) -> bool:
        return bool(await self._run("dead_letter", params.job_id, params.worker_id, params.error, str(params.reason)))

    async def nack_job(self, params: NackJobParams, /) -> bool:
        started = "1" if params.handler_started else ""
        return bool(await self._run("requeue", "nack", params.job_id, params.worker_id, started))

    # -- queue pauses (QueuePauseStore), steps and checkpoints (JobStepStore) ---------

    async def pause_queue(self, params: PauseQueueParams, /) -> bool:
        return bool(await self._run("pause_queue", params.queue, dumps(params.reason)))

    async def resume_queue(self, params: ResumeQueueParams, /) -> bool:
        return bool(await self._run("resume_queue", params.queue))

    async def paused_queues(self) -> list[PausedQueue]:
        client, _ = await self._ready()
        with translated_errors(self._target):
            fields = text_map(await client.hgetall(self.keys.paused_queues))
        return sorted((paused_queue(queue, text) for queue, text in fields.items()), key=lambda p: p.queue)

    async def save_step(self, params: SaveStepParams, /) -> bool:
        return bool(
            await self._run("save_step", params.job_id, params.worker_id, dumps(params.name), params.value_json)
        )

    async def save_checkpoint(self, params: SaveCheckpointParams, /) -> bool:
        return bool(await self._run("save_checkpoint", params.job_id, params.worker_id, params.value_json))

    # -- progress (JobProgressStore) and job logs (JobLogStore) -------------------------

    async def save_progress(self, params: SaveProgressParams, /) -> bool:
        return bool(await self._run("save_progress", params.job_id, params.worker_id, params.progress_json))

    async def save_job_logs(self, params: SaveJobLogsParams, /) -> bool:
        return bool(await self._run("save_job_logs", params.job_id, params.worker_id, params.logs_json))

    async def get_job_logs(self, params: GetJobLogsParams, /) -> str | None:
        logs = await self._run("job_logs", params.job_id)
        return None if logs is None else str(logs)

    # -- re-sealing stored sealed values (KeyRotationStore, soniq_redis.key_rotation) -------

    async def sealed_rows(self, params: SealedRowsParams, /) -> SealedRowPage:
        return await key_rotation.sealed_rows(self._run, params)

    async def reseal_row(self, params: ResealRowParams, /) -> bool:
        return await key_rotation.reseal_row(self._run, params)

    # -- workers -------------------------------------------------------------------

    async def register_worker(self, params: RegisterWorkerParams, /) -> None:
        worker = params.worker
        queues = None if worker.queues is None else list(worker.queues)
        await self._run(
            "register_worker",
            WorkerStatus.ACTIVE.value,
            worker.id,
            worker.hostname,
            worker.pid,
            json.dumps(queues),
            worker.concurrency,
            "" if worker.job_names is None else dumps(list(worker.job_names)),
            "" if worker.job_versions is None else dumps(dict(worker.job_versions)),
        )

    async def heartbeat(self, params: HeartbeatParams, /) -> bool:
        return bool(await self._run("heartbeat", params.worker_id))

    async def set_worker_status(self, params: SetWorkerStatusParams, /) -> bool:
        status = WorkerStatus(params.status).value
        shutdown = "" if params.last_shutdown is None else dumps(dict(params.last_shutdown))
        return bool(await self._run("set_worker_status", params.worker_id, status, params.state or "", shutdown))

    async def list_workers(self) -> list[WorkerRecord]:
        rows = await self._run("list_workers")
        return sorted((worker_record(pairs(row)) for row in rows), key=lambda w: (w.started_at, w.id))

    # -- stale recovery ----------------------------------------------------------------

    async def find_stale_jobs(self, params: FindStaleJobsParams, /) -> StaleScan:
        timeout_us = max(0, round(params.heartbeat_timeout * 1_000_000))
        reply = await self._run("find_stale", timeout_us, self._sweeper_token, SWEEP_LOCK_MS)
        if not int(reply[0]):
            return StaleScan(skipped=True)
        rows = sorted((job_record(pairs(row)) for row in reply[2]), key=lambda r: (r.updated_at, r.id))
        return StaleScan(stale_workers=tuple(str(w) for w in reply[1]), orphaned=tuple(rows))

    async def rescue_jobs(self, params: RescueJobsParams, /) -> set[str]:
        args: list[str | int] = []
        for rescue in params.rescues:
            args += _rescue_args(rescue)
        written = await self._run("rescue", self._sweeper_token, len(params.rescues), *args)
        return {str(job_id) for job_id in written}

    async def expire_unknown_jobs(self, params: ExpireUnknownJobsParams, /) -> set[str]:
        older_than_us = max(0, round(params.older_than * 1_000_000))
        moved = await self._run(
            "expire_unknown",
            older_than_us,
            params.error,
            DeadLetterReason.UNKNOWN_JOB.value,
            *dict.fromkeys(params.known_names),
        )
        return {str(job_id) for job_id in moved}

    # -- observation -----------------------------------------------------------------

    async def queue_stats(self, params: QueueStatsParams, /) -> QueueStats:
        queue = params.queue
        counts = await self._run("queue_stats", queue or "", "0" if queue is None else "1")
        queued, processing, done, cancelled, dead = (int(n) for n in counts)
        return QueueStats(
            total=queued + processing + done + cancelled + dead,
            queued=queued,
            processing=processing,
            done=done,
            dead_letter=dead,
            cancelled=cancelled,
        )

    async def wait_for_jobs(self, params: WaitForJobsParams, /) -> None:
        queues, timeout = params.queues, params.timeout
        if timeout <= 0:
            return
        await self._ready()
        # Held locally: `close()` may run while this waits (a run-once worker closes
        # the backend as it exits) and clears the attribute under our feet.
        wakeups = self._wakeups
        if wakeups is None:
            return
        await wakeups.start(ready_timeout=min(timeout, 2.0))
        # A row scheduled for later publishes nothing when it becomes due, so
        # wake up in time for the earliest one.
        with contextlib.suppress(SoniqError):
            due_in_us = await self._run("next_due", *_queue_args(queues))
            if due_in_us is not None and 0 < int(due_in_us) < timeout * 1_000_000:
                timeout = int(due_in_us) / 1_000_000
        await wakeups.wait(queues=queues, timeout=timeout, since=self._claim_generation)
        # What woke this wait must not cut the next one short too.
        self._claim_generation = wakeups.generation

    # -- dead letters ----------------------------------------------------------------

    async def get_dead_letter(self, params: GetDeadLetterParams, /) -> DeadLetterRecord | None:
        client, _ = await self._ready()
        with translated_errors(self._target):
            fields = await client.hgetall(self.keys.dead(params.job_id))
        return dead_letter_record(text_map(fields)) if fields else None

    async def replay_dead_letter(self, params: ReplayDeadLetterParams, /) -> str | None:
        scheduled_at = to_micros(params.scheduled_at)
        new_id = await self._run(
            "replay",
            JobStatus.QUEUED.value,
            params.job_id,
            params.new_job_id,
            scheduled_at,
            params.queue or "",
            "" if params.priority is None else params.priority,
            "" if params.max_attempts is None else params.max_attempts,
            params.attempts,
        )
        return None if new_id is None else str(new_id)

    async def purge_dead_letter(self, params: PurgeDeadLetterParams, /) -> bool:
        return bool(await self._run("purge", params.job_id))

    # -- deleting jobs and bulk dead-letter operations ----

    async def delete_job(self, params: DeleteJobParams, /) -> bool:
        return bool(await self._run("delete_job", params.job_id))

    async def delete_dead_letters(self, params: DeleteDeadLettersParams, /) -> set[str]:
        if params.limit <= 0:
            return set()
        deleted = await self._run("dead_filter", "delete", *_filter_args(params.filter), params.limit)
        return {str(job_id) for job_id in deleted}

    async def dead_letter_stats(self, params: DeadLetterStatsParams, /) -> DeadLetterStats:
        wanted = params.filter if params.filter is not None else DeadLetterFilter()
        reply = await self._run("dead_filter", "stats", *_filter_args(wanted), 0)
        total, revived, oldest, newest, by_name, by_queue, by_reason = reply

        def counts(text: str) -> dict[str, int]:
            return {str(key): int(value) for key, value in json.loads(text).items()}

        return DeadLetterStats(
            total=int(total),
            by_job_name=counts(by_name),
            by_queue=counts(by_queue),
            by_reason=counts(by_reason),
            resurrected=int(revived),
            oldest_moved_at=from_micros(int(oldest)) if oldest else None,
            newest_moved_at=from_micros(int(newest)) if newest else None,
        )

    # -- dashboard reads (soniq_redis.reads) -------------------------------------

    async def job_counts(self, params: JobCountsParams, /) -> list[QueueCounts]:
        reply = await self._run("job_counts", *reads.job_counts_args(params))
        return reads.counts_from_reply(reply)

    async def job_activity(self, params: JobActivityParams, /) -> list[ActivityBucket]:
        client, _ = await self._ready()
        with translated_errors(self._target):
            seconds, micros = await client.time()
            return await reads.job_activity(client, self.keys, params, from_micros(seconds * 1_000_000 + micros))

    async def job_page(self, params: JobPageParams, /) -> JobPage:
        client, _ = await self._ready()
        with translated_errors(self._target):
            return await reads.job_page(client, self.keys, params)

    async def dead_letter_page(self, params: DeadLetterPageParams, /) -> DeadLetterPage:
        client, _ = await self._ready()
        with translated_errors(self._target):
            return await reads.dead_letter_page(client, self.keys, params)

    async def queue_names(self) -> list[str]:
        client, _ = await self._ready()
        with translated_errors(self._target):
            return await reads.queue_names(client, self.keys)

    # -- schema status --

    async def schema_status(self) -> SchemaStatus:
        # A client of its own: connect() writes the schema key, and this must only read it.
        self._leave_other_loop()
        client = self._target.client()
        try:
            with translated_errors(self._target, connecting=True):
                stored = await client.get(self.keys.schema)
        finally:
            with contextlib.suppress(Exception):
                await client.aclose()
        current = int(stored) if stored is not None else 0

        def step(version: int) -> MigrationStep:
            return MigrationStep(version, "keys and scripts" if version == 1 else f"schema version {version}")

        return SchemaStatus(
            backend="redis",
            location=f"key prefix {self.keys.prefix!r}",
            applied=tuple(step(v) for v in range(1, min(current, SCHEMA_VERSION) + 1)),
            pending=tuple(step(v) for v in range(current + 1, SCHEMA_VERSION + 1)),
            newer_than_known=current > SCHEMA_VERSION,
            details={"schema_key": self.keys.schema},
        )

    # -- cancelling running jobs, waiting for jobs --------

    async def request_cancel(self, params: RequestCancelParams, /) -> CancelOutcome:
        return CancelOutcome(str(await self._run("request_cancel", params.job_id)))

    async def cancel_requests(self, params: CancelRequestsParams, /) -> set[str]:
        return {str(job_id) for job_id in await self._run("cancel_requests", params.worker_id)}

    async def finish_cancel(self, params: FinishCancelParams, /) -> bool:
        return bool(
            await self._run("finish_cancel", JobStatus.CANCELLED.value, params.job_id, params.worker_id, params.message)
        )

    async def watch_jobs(self, params: WatchJobsParams, /) -> None:
        if not params.job_ids:
            return
        await self._ready()
        wakeups = self._wakeups
        if wakeups is not None:
            # Subscribed before the rows are marked, so that a change after the caller's
            # next read of them is heard.
            await wakeups.start()
        await self._run("watch", *dict.fromkeys(params.job_ids))

    async def wait_for_job_changes(self, params: WaitForJobChangesParams, /) -> set[str] | None:
        await self._ready()
        wakeups = self._wakeups
        if wakeups is None:
            return None
        return await wakeups.wait_changes(params.job_ids, params.timeout)

    # -- schedules, leader lease, pruning ----

    async def upsert_schedule(self, params: UpsertScheduleParams, /) -> ScheduleRecord:
        return schedules.schedule_record(await self._run("schedule_upsert", *schedules.upsert_args(params)))

    async def get_schedule(self, params: GetScheduleParams, /) -> ScheduleRecord | None:
        client, _ = await self._ready()
        with translated_errors(self._target):
            fields = await client.hgetall(self.keys.schedule(params.name))
        return schedules.schedule_from_fields(text_map(fields)) if fields else None

    async def list_schedules(self, params: ListSchedulesParams, /) -> list[ScheduleRecord]:
        if params.names is not None and not params.names:
            return []
        names = [] if params.names is None else list(params.names)
        rows = await self._run("schedule_list", *names)
        return sorted((schedules.schedule_record(row) for row in rows), key=lambda row: row.name)

    async def set_schedule_paused(self, params: SetSchedulePausedParams, /) -> bool:
        next_run = "" if params.next_run is None else to_micros(params.next_run)
        return bool(await self._run("schedule_paused", params.name, "1" if params.paused else "0", next_run))

    async def remove_schedule(self, params: RemoveScheduleParams, /) -> bool:
        return bool(await self._run("schedule_remove", params.name))

    async def due_schedules(self, params: DueSchedulesParams, /) -> list[ScheduleRecord]:
        now = "" if params.now is None else to_micros(params.now)
        rows = await self._run("schedule_due", now, max(params.limit, 0))
        return [schedules.schedule_record(row) for row in rows]

    async def fire_schedule(self, params: FireScheduleParams, /) -> list[str] | None:
        for job in params.jobs:
            if not -PRIORITY_LIMIT < job.priority < PRIORITY_LIMIT:
                raise ValueError(f"priority must be between -{PRIORITY_LIMIT} and {PRIORITY_LIMIT}, got {job.priority}")
        ids = await self._run("schedule_fire", JobStatus.QUEUED.value, *schedules.fire_args(params))
        return None if ids is None else [str(job_id) for job_id in ids]

    async def acquire_lease(self, params: AcquireLeaseParams, /) -> LeaseRecord | None:
        ttl_us = max(round(params.ttl * 1_000_000), 0)
        reply = await self._run("lease_acquire", params.name, params.holder, ttl_us)
        return None if reply is None else schedules.lease_record(reply)

    async def release_lease(self, params: ReleaseLeaseParams, /) -> bool:
        return bool(await self._run("lease_release", params.name, params.holder))

    async def get_lease(self, params: GetLeaseParams, /) -> LeaseRecord | None:
        reply = await self._run("lease_get", params.name)
        return None if reply is None else schedules.lease_record(reply)

    async def prune_jobs(self, params: PruneJobsParams, /) -> int:
        now = "" if params.now is None else to_micros(params.now)
        return int(await self._run("prune_jobs", now, max(params.limit, 0)))

    async def prune_dead_letters(self, params: PruneDeadLettersParams, /) -> int:
        return int(await self._run("prune_dead", to_micros(params.before), max(params.limit, 0)))


def _filter_args(wanted: DeadLetterFilter) -> list[str | int]:
    """`dead_filter.lua`'s filter arguments (ARGV 3 to 8)."""

    def listed(values: Sequence[str] | None) -> str:
        return "" if values is None else json.dumps(list(values))

    return [
        listed(wanted.job_names),
        listed(wanted.queues),
        listed(wanted.reasons),
        "" if wanted.moved_from is None else to_micros(wanted.moved_from),
        "" if wanted.moved_to is None else to_micros(wanted.moved_to),
        "" if wanted.resurrected is None else int(wanted.resurrected),
    ]
