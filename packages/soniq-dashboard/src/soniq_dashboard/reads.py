"""Every store read the dashboard makes, one async method per question a page asks.

Each method maps onto the backend protocol's reads (protocol 2): `job_counts`
for the overview's counts, `job_activity` for the hour and day windows,
`job_page` and `dead_letter_page` for keyset-paginated listings, `queue_names`,
and `list_workers`, whose rows carry the exact shutdown state and what the
last shutdown did. Every answer is exact; no read scans more than one page.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from soniq import Soniq
from soniq.backend import Backend
from soniq.limits import describe
from soniq.params import DeadLetterPageParams, JobActivityParams, JobCountsParams, JobCursor, JobPageParams, LimitScope
from soniq.records import JobStatus

PAGE_SIZE = 50
BULK_PAGE = 200
STATUSES = ("queued", "processing", "done", "cancelled")
WINDOWS = (("last hour", timedelta(hours=1)), ("last day", timedelta(days=1)))
# For rows written before the worker recorded its state (or by a worker that does not): status mapped to a state.
WORKER_STATES = {"active": "RUNNING", "stopping": "DRAINING", "stopped": "STOPPED"}


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


@dataclass(frozen=True, slots=True)
class WindowCounts:
    label: str
    done: int
    failed: int
    exact: bool


@dataclass(frozen=True, slots=True)
class Overview:
    totals: dict[str, int]
    queues: list[tuple[str, dict[str, int]]]
    windows: list[WindowCounts]
    oldest_queued_age: timedelta | None
    workers_running: int
    workers_total: int
    queue_limits: dict[str, str] = field(default_factory=dict)
    """Queue name -> its fleet-wide limits in words (issue 19), as this app declares them."""
    job_limits: list[tuple[str, str]] = field(default_factory=list)
    """(job name, its limits in words) for every job of this app that declares limits."""


@dataclass(frozen=True, slots=True)
class JobFilter:
    status: str | None = None
    queue: str | None = None
    name: str | None = None
    search: str | None = None


@dataclass(frozen=True, slots=True)
class Page:
    rows: list[dict[str, Any]]
    next_cursor: str | None
    exact: bool = True
    """Always True since protocol 2's keyset reads (kept for the templates)."""


@dataclass(frozen=True, slots=True)
class JobDetail:
    job: dict[str, Any]
    dead_letter: bool
    trace_id: str | None


@dataclass(frozen=True, slots=True)
class WorkerView:
    id: str
    hostname: str
    pid: int
    queues: tuple[str, ...] | None
    concurrency: int
    state: str
    heartbeat_age: timedelta
    stale: bool
    started_at: datetime
    in_flight: list[str] = field(default_factory=list)
    state_changed_at: datetime | None = None
    last_shutdown: dict[str, Any] | None = None
    lost: bool = False
    """Stale recovery marked it stopped before the worker reached STOPPED itself."""


@dataclass(frozen=True, slots=True)
class Schedules:
    configured: bool
    rows: list[dict[str, Any]]


def encode_cursor(cursor: JobCursor | None) -> str | None:
    if cursor is None:
        return None
    raw = json.dumps({"t": _aware(cursor.at).isoformat(), "i": cursor.id})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> JobCursor | None:
    if not cursor:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return JobCursor(at=_aware(datetime.fromisoformat(data["t"])), id=str(data["i"]))
    except (ValueError, KeyError, TypeError):
        return None


def trace_id_of(trace_context: Any) -> str | None:
    """The W3C trace id from a `traceparent` header stored with the job, if any."""
    if not isinstance(trace_context, dict):
        return None
    parts = str(trace_context.get("traceparent", "")).split("-")
    if len(parts) == 4 and len(parts[1]) == 32 and parts[1].strip("0"):
        return parts[1]
    return None


class DashboardReads:
    """The dashboard's questions to the store, each answered by protocol 2's reads."""

    def __init__(self, app: Soniq) -> None:
        self.app = app

    async def _backend(self) -> Backend:
        return await self.app.connected_backend()

    async def queue_names(self) -> list[str]:
        return list(await (await self._backend()).queue_names())

    async def overview(self) -> Overview:
        backend = await self._backend()
        counts = await backend.job_counts(JobCountsParams())
        keys = ("total", "queued", "processing", "done", "dead_letter", "cancelled")
        queues = [(c.queue, {k: int(getattr(c, k)) for k in keys}) for c in counts]
        limits = self.app.group_limits()  # declared in code and settings: no store read
        queue_limits = {lim.name: describe(lim) for lim in limits if lim.scope is LimitScope.QUEUE}
        listed = {name for name, _ in queues}
        if any(name not in listed for name in queue_limits):  # a limited queue shows before its first job
            queues = sorted(queues + [(n, dict.fromkeys(keys, 0)) for n in queue_limits if n not in listed])
        totals = {k: sum(q[1][k] for q in queues) for k in keys}
        oldest = min((c.oldest_queued_at for c in counts if c.oldest_queued_at is not None), default=None)
        workers = await backend.list_workers()
        return Overview(
            totals=totals,
            queues=queues,
            windows=await self._windows(backend),
            oldest_queued_age=None if oldest is None else max(timedelta(0), _now() - _aware(oldest)),
            workers_running=sum(1 for w in workers if w.status.value != "stopped"),
            workers_total=len(workers),
            queue_limits=queue_limits,
            job_limits=[(lim.name, describe(lim)) for lim in limits if lim.scope is LimitScope.JOB],
        )

    async def _windows(self, backend: Backend) -> list[WindowCounts]:
        """Done and dead-lettered rows per window, from one read of the longest window in minute buckets.

        One read, not one per window: the shorter windows are the trailing buckets of the longest, so the
        rows of the last hour are counted once instead of twice.
        """
        now = _now()
        longest = max(span for _, span in WINDOWS)
        buckets = await backend.job_activity(JobActivityParams(since=now - longest, bucket_seconds=60))
        result = []
        for label, span in WINDOWS:
            start = now - span
            inside = [b for b in buckets if b.start >= start]
            done = sum(b.done for b in inside)
            failed = sum(b.dead_lettered for b in inside)
            result.append(WindowCounts(label=label, done=done, failed=failed, exact=True))
        return result

    async def oldest_queued_age(self, queued: int) -> timedelta | None:
        if queued <= 0:
            return None
        counts = await (await self._backend()).job_counts(JobCountsParams())
        oldest = min((c.oldest_queued_at for c in counts if c.oldest_queued_at is not None), default=None)
        return None if oldest is None else max(timedelta(0), _now() - _aware(oldest))

    async def jobs_page(self, flt: JobFilter, cursor: str | None = None, limit: int = PAGE_SIZE) -> Page:
        """Newest first, `limit` rows after `cursor` (keyset on ``(created_at, id)``); a name filter is a prefix."""
        search = (flt.search or "").strip() or None
        if search and cursor is None:
            # An id is one primary-key probe; `search` in the page read would be a scan filtered by
            # "id or name prefix", which finds an old id only after walking every newer row.
            found = await self.app.get_job(search)
            # `get_job` also answers for a dead letter (issue 12); those have their own page.
            if found is not None and found.get("status") != "dead_letter":
                return Page(rows=[found], next_cursor=None)
        page = await (await self._backend()).job_page(
            JobPageParams(
                statuses=[JobStatus(flt.status)] if flt.status else None,
                queues=[flt.queue] if flt.queue else None,
                job_name_prefix=(flt.name or "").strip() or None,
                search=search,
                before=decode_cursor(cursor),
                limit=limit,
            )
        )
        return Page(rows=[row.to_dict() for row in page.rows], next_cursor=encode_cursor(page.next_cursor))

    async def job(self, job_id: str) -> JobDetail | None:
        """A job's full record, or its dead-letter row when it has moved there."""
        row = await self.app.get_job(job_id)
        if row is not None and row.get("status") != "dead_letter":
            return JobDetail(job=row, dead_letter=False, trace_id=trace_id_of(row.get("trace_context")))
        dead = await self.app.dead_letter.get(job_id)
        if dead is not None:
            return JobDetail(job=dead, dead_letter=True, trace_id=None)
        return None

    async def dead_letters(
        self, *, queue: str | None = None, name: str | None = None, cursor: str | None = None, limit: int = PAGE_SIZE
    ) -> Page:
        """Most recently moved first, keyset on ``(moved_to_dead_letter_at, id)``; a name filter is a prefix."""
        page = await (await self._backend()).dead_letter_page(
            DeadLetterPageParams(
                queues=[queue] if queue else None,
                job_name_prefix=(name or "").strip() or None,
                before=decode_cursor(cursor),
                limit=limit,
            )
        )
        return Page(rows=[row.to_dict() for row in page.rows], next_cursor=encode_cursor(page.next_cursor))

    async def dead_letter_ids(self, *, queue: str | None = None, name: str | None = None) -> tuple[list[str], bool]:
        """Ids of every dead letter matching the filter, read page by page; the bool is always True (all of them)."""
        ids: list[str] = []
        cursor: str | None = None
        while True:
            page = await self.dead_letters(queue=queue, name=name, cursor=cursor, limit=BULK_PAGE)
            ids.extend(row["id"] for row in page.rows)
            cursor = page.next_cursor
            if cursor is None:
                return ids, True

    async def workers(self) -> list[WorkerView]:
        """Each worker row with its exact shutdown state, heartbeat age, staleness, held rows and last shutdown."""
        now = _now()
        backend = await self._backend()
        timeout = timedelta(seconds=float(self.app.settings.heartbeat_timeout))
        live = list(await backend.list_workers())
        in_flight_cap = max(100, 2 * sum(w.concurrency for w in live if w.status.value != "stopped"))
        processing = await backend.job_page(JobPageParams(statuses=[JobStatus.PROCESSING], limit=in_flight_cap))
        held: dict[str, list[str]] = {}
        for row in processing.rows:
            if row.worker_id:
                held.setdefault(row.worker_id, []).append(row.id)
        views = []
        for w in live:
            age = max(timedelta(0), now - _aware(w.last_heartbeat))
            status = w.status.value
            state = w.state or WORKER_STATES.get(status, status.upper())
            lost = status == "stopped" and state != "STOPPED"
            views.append(
                WorkerView(
                    id=w.id,
                    hostname=w.hostname,
                    pid=w.pid,
                    queues=tuple(w.queues) if w.queues else None,
                    concurrency=w.concurrency,
                    state="STOPPED" if lost else state,
                    heartbeat_age=age,
                    stale=status != "stopped" and age > timeout,
                    started_at=_aware(w.started_at),
                    in_flight=held.get(w.id, []),
                    state_changed_at=None if w.state_changed_at is None else _aware(w.state_changed_at),
                    last_shutdown=dict(w.last_shutdown) if w.last_shutdown else None,
                    lost=lost,
                )
            )
        order = {"RUNNING": 0, "DRAINING": 1, "FORCE_TIMEOUT_PATH": 1, "WAIT_FOR_THREAD": 1, "STOPPED": 2}
        views.sort(key=lambda v: (order.get(v.state, 1), -v.started_at.timestamp()))
        return views

    async def worker(self, worker_id: str) -> WorkerView | None:
        return next((w for w in await self.workers() if w.id == worker_id), None)

    async def schedules(self) -> Schedules:
        """Periodic jobs: none exist in this version of soniq-core."""
        return Schedules(configured=False, rows=[])


def status_values() -> Sequence[str]:
    return STATUSES
