"""What every contract test uses: a backend per test in a fresh namespace, and small helpers.

Helpers raise AssertionError with a full message themselves, so a failure
reads well even where pytest does not rewrite asserts.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from soniq.backend import (
    Backend,
    ClaimJobsParams,
    CompleteJobsParams,
    EnqueueJobsParams,
    GetJobParams,
    HeartbeatParams,
    JobRecord,
    JobResult,
    MarkStartedParams,
    NewJob,
    QueueStatsParams,
    RecoveryResult,
    RegisterWorkerParams,
    RetryJobParams,
    SchemaAdmin,
    StaleJobPolicy,
    WorkerInfo,
    has_role,
    sweep_stale_workers,
)

BackendFactory = Callable[[str], Backend]
"""Builds an unconnected backend for a namespace (like ``from_url(url, namespace=...)``).

Two calls with the same namespace must reach the same stored state when the
backend's `capabilities.shared_across_processes` is true. For such backends
the factory must also pickle (a module-level function, a `functools.partial`
or `UrlBackendFactory`), because the claim test builds backends in other
processes with it."""


@dataclass(frozen=True)
class UrlBackendFactory:
    """The URL form's factory: the backend class registered for the URL's scheme."""

    url: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, namespace: str) -> Backend:
        from soniq.backend import backend_class_for

        backend: Backend = backend_class_for(self.url).from_url(self.url, namespace=namespace, **self.options)
        return backend


MISSING_JOB_ID = "00000000-0000-4000-8000-000000000000"
"""A well-formed job id no test ever creates (tests create random uuid4 ids)."""


def fresh_namespace() -> str:
    """Lower-case letters, digits and underscores only, so it is a valid schema, file or key prefix."""
    return f"soniq_ct_{uuid.uuid4().hex[:16]}"


def utc_now() -> datetime:
    return datetime.now(UTC)


class ContractHarness:
    """Opens backends for one test; every one it opens it also drops and closes."""

    def __init__(self, factory: BackendFactory, *, heartbeat_timeout: float, stale_deadline: float) -> None:
        self.factory = factory
        self.heartbeat_timeout = heartbeat_timeout
        self.stale_deadline = stale_deadline
        self._namespaces: dict[int, str] = {}

    @contextlib.asynccontextmanager
    async def backend(self) -> AsyncIterator[Backend]:
        """A connected, set-up, empty backend in a namespace of its own."""
        namespace = fresh_namespace()
        backend = self.factory(namespace)
        self._namespaces[id(backend)] = namespace
        await backend.connect()
        try:
            await backend.setup()
            stats = await backend.queue_stats(QueueStatsParams())
            if stats.total or await backend.list_workers():
                raise AssertionError(
                    f"the backend built for the fresh namespace {namespace!r} is not empty ({stats}); "
                    "the factory must give each namespace its own state"
                )
            yield backend
        finally:
            try:
                if has_role(backend, SchemaAdmin):
                    await backend.drop_schema()
                # Without SchemaAdmin there is nothing to call: the namespace is the test's own and
                # unique, so what it holds is left to the backend (an in-process store goes with it).
            finally:
                await backend.close()
                self._namespaces.pop(id(backend), None)

    def namespace_of(self, backend: Backend) -> str:
        return self._namespaces[id(backend)]

    @contextlib.asynccontextmanager
    async def peer(self, backend: Backend) -> AsyncIterator[Backend]:
        """A second backend instance on `backend`'s namespace (connected; not dropped on exit)."""
        other = self.factory(self.namespace_of(backend))
        await other.connect()
        try:
            yield other
        finally:
            await other.close()

    def slack(self, backend: Backend) -> timedelta:
        """How far a stored "now" may sit outside the local clock window (clock skew, rounding)."""
        return timedelta(seconds=1) + backend.capabilities.timestamp_precision


# -- building data ------------------------------------------------------------


def new_job(**fields: Any) -> NewJob:
    values: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "job_name": "contract.job",
        "args": {"n": 1},
        "queue": "default",
        "priority": 100,
        "scheduled_at": utc_now() - timedelta(seconds=5),
        "max_attempts": 3,
    }
    values.update(fields)
    return NewJob(**values)


async def enqueue(backend: Backend, **fields: Any) -> JobRecord:
    job = new_job(**fields)
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    return await must_get(backend, job.id)


async def complete_one(backend: Backend, *, job_id: str, worker_id: str, result: Any) -> bool:
    """One row through the batched completion write; True when it was written."""
    written = await backend.complete_jobs(
        CompleteJobsParams(worker_id=worker_id, results=[JobResult(job_id=job_id, result=result)])
    )
    return job_id in written


async def mark_started_one(backend: Backend, *, job_id: str, worker_id: str) -> bool:
    written = await backend.mark_started(MarkStartedParams(worker_id=worker_id, job_ids=[job_id]))
    return job_id in written


async def must_get(backend: Backend, job_id: str) -> JobRecord:
    row = await backend.get_job(GetJobParams(job_id=job_id))
    if row is None:
        raise AssertionError(f"get_job({job_id!r}) returned None; the row should exist")
    return row


def unique_queue(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def enqueue_and_claim(
    backend: Backend, *, worker_id: str, mark_started: bool = False, **fields: Any
) -> JobRecord:
    """Enqueue one job on a queue of its own, claim exactly that row for `worker_id`, return it as stored."""
    fields.setdefault("queue", unique_queue())
    job = await enqueue(backend, **fields)
    claimed = await backend.claim_jobs(
        ClaimJobsParams(worker_id=worker_id, queues=[job.queue], limit=1, mark_started=mark_started)
    )
    if [row.id for row in claimed] != [job.id]:
        raise AssertionError(f"claiming the only due row {job.id} of queue {job.queue!r} returned {claimed!r}")
    return await must_get(backend, job.id)


async def enqueue_with_history(backend: Backend, *, error: str = "boom", **fields: Any) -> JobRecord:
    """A queued row that already failed once: attempts 1 and `last_error` set, due now."""
    row = await enqueue_and_claim(backend, worker_id="history-worker", mark_started=True, **fields)
    due = utc_now() - timedelta(seconds=1)
    if not await backend.retry_job(
        RetryJobParams(job_id=row.id, worker_id="history-worker", error=error, scheduled_at=due)
    ):
        raise AssertionError("retry_job by the owner returned False")
    return await must_get(backend, row.id)


def worker_info(worker_id: str | None = None, *, queues: tuple[str, ...] | None = None) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id or f"worker-{uuid.uuid4().hex[:8]}",
        hostname="contract-host",
        pid=4242,
        queues=queues,
        concurrency=4,
    )


async def register(backend: Backend, worker_id: str | None = None) -> str:
    info = worker_info(worker_id)
    await backend.register_worker(RegisterWorkerParams(worker=info))
    return info.id


# -- time and waiting ---------------------------------------------------------


async def wait_until(
    check: Callable[[], Awaitable[bool]], *, deadline: float, message: str, interval: float = 0.01
) -> None:
    """Poll `check` until it is true, or fail after `deadline` seconds."""
    give_up = time.monotonic() + deadline
    while not await check():
        if time.monotonic() > give_up:
            raise AssertionError(f"gave up after {deadline:g}s: {message}")
        await asyncio.sleep(interval)


@contextlib.asynccontextmanager
async def heartbeating(backend: Backend, worker_ids: Iterable[str], *, interval: float = 0.03) -> AsyncIterator[None]:
    """Keep workers alive, as a running worker does, for the duration of the block."""
    ids = list(worker_ids)

    async def beat() -> None:
        while True:
            for worker_id in ids:
                if not await backend.heartbeat(HeartbeatParams(worker_id=worker_id)):
                    raise AssertionError(f"heartbeat of live worker {worker_id} returned False")
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def sweep_until_stale(
    harness: ContractHarness,
    backend: Backend,
    *,
    stale_worker: str,
    policy: StaleJobPolicy = StaleJobPolicy.REQUEUE,
    heartbeat_timeout: float | None = None,
) -> tuple[RecoveryResult, list[RecoveryResult]]:
    """Sweep on the real clock until one sweep reports `stale_worker` stale.

    Returns that sweep's result and every earlier non-skipped result (which
    must not have touched anything the caller cares about)."""
    timeout = harness.heartbeat_timeout if heartbeat_timeout is None else heartbeat_timeout
    earlier: list[RecoveryResult] = []
    give_up = time.monotonic() + harness.stale_deadline
    while True:
        result = await sweep(backend, heartbeat_timeout=timeout, policy=policy)
        if not result.skipped:
            if stale_worker in result.stale_workers:
                return result, earlier
            earlier.append(result)
        if time.monotonic() > give_up:
            raise AssertionError(
                f"worker {stale_worker} stopped heartbeating, yet no sweep with heartbeat_timeout={timeout:g}s "
                f"reported it stale within {harness.stale_deadline:g}s (last result: {result})"
            )
        await asyncio.sleep(timeout / 5)


async def sweep(backend: Backend, *, heartbeat_timeout: float, policy: StaleJobPolicy) -> RecoveryResult:
    """One sweep as a worker runs it: the backend's find and rescue around core's decision."""
    return await sweep_stale_workers(backend, heartbeat_timeout=heartbeat_timeout, policy=policy)


def assert_between(value: datetime | None, before: datetime, after: datetime, slack: timedelta, what: str) -> None:
    """`value` is a UTC-aware timestamp taken between `before` and `after` (give or take `slack`)."""
    if value is None:
        raise AssertionError(f"{what} is None; expected a time between {before} and {after}")
    assert_utc(value, what)
    if not before - slack <= value <= after + slack:
        raise AssertionError(f"{what} = {value} is outside [{before}, {after}] (slack {slack})")


def assert_utc(value: datetime, what: str) -> None:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() != timedelta(0):
        raise AssertionError(f"{what} = {value!r} must be a timezone-aware UTC datetime")


def assert_same_time(value: datetime | None, expected: datetime, precision: timedelta, what: str) -> None:
    if value is None:
        raise AssertionError(f"{what} is None; expected {expected}")
    assert_utc(value, what)
    if abs(value - expected) > precision:
        raise AssertionError(f"{what} = {value}, expected {expected} (precision {precision})")


def fields_except(row: JobRecord, *names: str) -> dict[str, Any]:
    """The row as a dict without `names`: for "nothing else changed" comparisons."""
    data = row.to_dict()
    for name in names:
        data.pop(name)
    return data
