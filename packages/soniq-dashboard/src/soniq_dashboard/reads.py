"""Every store read the dashboard makes, one async method per question a page asks.

Each method maps onto the backend protocol's reads: `job_counts`
for the overview's counts, `job_activity` for the hour and day windows,
`job_page` and `dead_letter_page` for keyset-paginated listings, `queue_names`,
`list_workers`, whose rows carry the exact shutdown state and what the
last shutdown did (or what stale recovery took), and `list_schedules` through
`app.scheduler.list()`. Every answer is exact; no read scans more than one page, except the
jobs page's due-now and scheduled-for-later filters, which read at most `SCAN_READS` pages of
queued rows (the page says when it stopped short).

Backend roles: every page reads `OperatorReads` and the dead-letter page `DeadLetterStore`, so
`create_dashboard_app` refuses a backend without either (`require_dashboard_roles`,
`MissingBackendRoleError` naming "the dashboard"). Schedules are `ScheduleStore`: without it the
schedules page says the backend keeps none instead of failing. Queue pauses are `QueuePauseStore`:
without it the overview shows no pause state and offers no Pause button. A job's progress and log are
`JobProgressStore` and `JobLogStore`: without them the job page says the backend keeps none.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, cast

from soniq import Soniq, features
from soniq.backend import (
    ActivityBucket,
    DeadLetterPageParams,
    DeadLetterStore,
    JobActivityParams,
    JobCountsParams,
    JobCursor,
    JobLogStore,
    JobPageParams,
    JobProgressStore,
    JobStatus,
    LimitScope,
    OperatorReads,
    QueueCounts,
    QueuePauseStore,
    QueueStore,
    ScheduleStore,
    has_role,
)
from soniq.errors import MissingBackendRoleError
from soniq.observers import describe_limit as describe
from soniq.observers import redact_data, redact_text
from soniq_dashboard.job_reports import LOG_ROLE, PROGRESS_ROLE, JobLog, ProgressView, job_log, progress_view

PAGE_SIZE = 50
PREVIEW_CHARS = 120
BULK_PAGE = 200
COUNT_KEYS = ("total", "queued", "due", "scheduled", "processing", "done", "dead_letter", "cancelled")
"""The counts the overview shows per queue and in total."""
STATUSES = ("queued", "scheduled", "processing", "done", "cancelled")
"""The jobs page's status filter: `queued` means due now, `scheduled` queued for later (both stored `queued`)."""
# Reads one filtered jobs page may make while it looks for due (or not yet due) queued rows.
SCAN_READS = 4
WINDOWS = (("last hour", timedelta(hours=1)), ("last day", timedelta(days=1)))
# For rows written before the worker recorded its state (or by a worker that does not): status mapped to a state.
WORKER_STATES = {"active": "RUNNING", "stopping": "DRAINING", "stopped": "STOPPED"}


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _parse_time(value: Any) -> datetime | None:
    """An ISO time written into a JSON record, or None when it is missing or not one."""
    if not isinstance(value, str):
        return None
    try:
        return _aware(datetime.fromisoformat(value))
    except ValueError:
        return None


def _count(counts: QueueCounts, key: str) -> int:
    if key == "due":
        return max(0, counts.queued - counts.scheduled)
    return int(getattr(counts, key))


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
    """Age (since `created_at`) of the oldest queued row already due; rows scheduled for later are left out."""
    workers_running: int
    workers_total: int
    queue_limits: dict[str, str] = field(default_factory=dict)
    """Queue name -> its fleet-wide limits in words, as this app declares them."""
    job_limits: list[tuple[str, str]] = field(default_factory=list)
    """(job name, its limits in words) for every job of this app that declares limits."""
    activity: list[ActivityBucket] = field(default_factory=list)
    """The minute buckets of the last day the windows are counted from, oldest first (the charts draw them)."""


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
    """False when a filter the store cannot apply (due now or later) stopped reading before the page was full."""


@dataclass(frozen=True, slots=True)
class JobDetail:
    job: dict[str, Any]
    dead_letter: bool
    trace_id: str | None
    progress: ProgressView | None = None
    progress_missing_role: str | None = None
    """``JobProgressStore`` when the backend keeps no progress; else None."""
    log: JobLog = field(default_factory=JobLog)


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
    """Stale recovery marked it stopped before the worker reached STOPPED itself (`state` is then LOST)."""
    lost_in: str | None = None
    """For a lost worker: the state it had last written (RUNNING when it wrote none after registering)."""
    recovered_at: datetime | None = None
    """When stale recovery stopped it, as recovery recorded it on the row."""
    rescued: list[dict[str, Any]] = field(default_factory=list)
    """The rows stale recovery took from it: ``job_id``, ``action`` (release, requeue, dead_letter), ``reason``."""
    job_versions: dict[str, int] | None = None
    """The version of each job it runs, by name, when it reported them (`VersionedJobs`); else None."""


@dataclass(frozen=True, slots=True)
class PausedQueue:
    queue: str
    reason: str | None
    paused_at: datetime


@dataclass(frozen=True, slots=True)
class ScheduleView:
    name: str
    job_name: str
    queue: str
    trigger: str
    """``cron <expression> (<zone>)`` or ``every <seconds>s``, as `soniq inspect` words it."""
    paused: bool
    next_run: datetime
    last_run: datetime | None
    run_count: int
    last_job_id: str | None
    lateness: timedelta | None
    """How long past its due time an active schedule has not fired (None: on time, or paused)."""
    orphaned: bool
    """Neither this app nor any live worker has the job, so nothing fires it."""


@dataclass(frozen=True, slots=True)
class Schedules:
    rows: list[ScheduleView]
    late_after: timedelta
    """A due time older than this (two scheduler polls) counts as late."""
    missing_role: str | None = None
    """The role the backend lacks to keep schedules at all (``ScheduleStore``), or None."""


class DashboardStore(QueueStore, OperatorReads, DeadLetterStore, Protocol):
    """The backend roles the dashboard reads."""


def require_dashboard_roles(backend: QueueStore) -> DashboardStore:
    """`backend` as the dashboard reads it, or `MissingBackendRoleError` ("the dashboard") when it
    lacks `OperatorReads` or `DeadLetterStore`."""
    features.operator_reads(backend, features.DASHBOARD)
    features.dead_letter_store(backend, features.DASHBOARD)
    return cast(DashboardStore, backend)  # both roles checked just above


def mark_scheduled(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Add ``scheduled_later``: a queued row whose `scheduled_at` is still ahead, so no worker may take it yet."""
    at = row.get("scheduled_at")
    row["scheduled_later"] = row.get("status") == "queued" and isinstance(at, datetime) and _aware(at) > now
    return row


def run_words(row: dict[str, Any], *, dead_letter: bool = False) -> str:
    """Which run of its `max_attempts` a job is on, in the words of the user guide's "Runs and attempts".

    The stored `attempts` counts only the runs that count against the budget (a failure, a timeout, a run
    lost with its worker); a run that succeeds or is cancelled does not, so a done job's run was
    ``attempts + 1``, while a dead-lettered job's last counted run, number ``attempts``, ended it.
    """
    n, m = int(row.get("attempts") or 0), int(row.get("max_attempts") or 0)
    status = row.get("status")
    if dead_letter or status == "dead_letter":
        return "never ran" if n == 0 else f"ended on run {n} of {m}"
    if status == "processing":
        return f"run {n + 1} of {m}"
    if status == "done":
        return f"done on run {n + 1} of {m}"
    if status == "cancelled":
        # A run stopped by a cancel request, or a queued row cancelled before its next run started.
        when = "on" if row.get("cancel_requested") else "before"
        return f"cancelled {when} run {n + 1} of {m}"
    return f"run {n + 1} of {m} next"


def first_line(text: Any) -> str:
    """The first line of a stored error (its ``Type: message`` summary): what a list view shows."""
    return "" if not text else str(text).partition("\n")[0]


def args_preview(args: Any, limit: int = PREVIEW_CHARS) -> str:
    """A job's arguments on one short line, ``key=value, ...``, masked by `soniq.redaction`.

    Written as ``key=value`` so the helper masks a ``password=`` (``passwd``, ``pwd``) argument as it
    masks a DSN's, and a URL's password wherever one appears; a key named like a secret (token, key,
    card, ...) at any depth is masked first. Cut to `limit` characters only after that.
    """
    args = redact_data(args)
    if isinstance(args, dict):
        text = ", ".join(f"{key}={json.dumps(value, default=str, ensure_ascii=False)}" for key, value in args.items())
    else:
        text = json.dumps(args, default=str, ensure_ascii=False)
    text = redact_text(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
        at = _aware(datetime.fromisoformat(data["t"]))
        at.astimezone(UTC)  # a time a store can hold: an offset that overflows it is no cursor of ours
        job_id = data["i"]
    except (ValueError, KeyError, TypeError, OverflowError):
        return None
    # Made up, not made here: an id no store can hold is read as no cursor (the first page).
    if not isinstance(job_id, str) or not 1 <= at.year <= 9998 or not _storable(job_id):
        return None
    return JobCursor(at=at, id=job_id)


def _storable(text: str) -> bool:
    return len(text) <= 1024 and "\x00" not in text and not any("\ud800" <= ch <= "\udfff" for ch in text)


def trace_id_of(trace_context: Any) -> str | None:
    """The W3C trace id from a `traceparent` header stored with the job, if any."""
    if not isinstance(trace_context, dict):
        return None
    parts = str(trace_context.get("traceparent", "")).split("-")
    if len(parts) == 4 and len(parts[1]) == 32 and parts[1].strip("0"):
        return parts[1]
    return None


class DashboardReads:
    """The dashboard's questions to the store, each answered by the OperatorReads and DeadLetterStore roles' reads."""

    def __init__(self, app: Soniq) -> None:
        self.app = app

    async def _backend(self) -> DashboardStore:
        return require_dashboard_roles(await self.app.connected_backend())

    async def queue_names(self) -> list[str]:
        return list(await (await self._backend()).queue_names())

    async def overview(self) -> Overview:
        backend = await self._backend()
        counts = await backend.job_counts(JobCountsParams())
        keys = COUNT_KEYS
        # `queued` is every stored queued row; `due` the ones a worker may take now, `scheduled` the rest.
        queues = [(c.queue, {k: _count(c, k) for k in keys}) for c in counts]
        limits = self.app.group_limits()  # declared in code and settings: no store read
        queue_limits = {lim.name: describe(lim) for lim in limits if lim.scope is LimitScope.QUEUE}
        listed = {name for name, _ in queues}
        if any(name not in listed for name in queue_limits):  # a limited queue shows before its first job
            queues = sorted(queues + [(n, dict.fromkeys(keys, 0)) for n in queue_limits if n not in listed])
        totals = {k: sum(q[1][k] for q in queues) for k in keys}
        oldest = min((c.oldest_due_at for c in counts if c.oldest_due_at is not None), default=None)
        workers = await backend.list_workers()
        windows, activity = await self._windows(backend)
        return Overview(
            totals=totals,
            queues=queues,
            windows=windows,
            oldest_queued_age=None if oldest is None else max(timedelta(0), _now() - _aware(oldest)),
            workers_running=sum(1 for w in workers if w.status.value != "stopped"),
            workers_total=len(workers),
            queue_limits=queue_limits,
            job_limits=[(lim.name, describe(lim)) for lim in limits if lim.scope is LimitScope.JOB],
            activity=activity,
        )

    async def _windows(self, backend: DashboardStore) -> tuple[list[WindowCounts], list[ActivityBucket]]:
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
        return result, buckets

    async def oldest_queued_age(self, queued: int) -> timedelta | None:
        """How long the oldest queued row that is already due has waited since it was created."""
        if queued <= 0:
            return None
        counts = await (await self._backend()).job_counts(JobCountsParams())
        oldest = min((c.oldest_due_at for c in counts if c.oldest_due_at is not None), default=None)
        return None if oldest is None else max(timedelta(0), _now() - _aware(oldest))

    async def jobs_page(self, flt: JobFilter, cursor: str | None = None, limit: int = PAGE_SIZE) -> Page:
        """Newest first, `limit` rows after `cursor` (keyset on ``(created_at, id)``); a name filter is a prefix."""
        search = (flt.search or "").strip() or None
        if search and cursor is None:
            # An id is one primary-key probe; `search` in the page read would be a scan filtered by
            # "id or name prefix", which finds an old id only after walking every newer row.
            found = await self.app.get_job(search)
            # `get_job` also answers for a dead letter; those have their own page.
            if found is not None and found.get("status") != "dead_letter":
                return Page(rows=[mark_scheduled(found, _now())], next_cursor=None)
        backend = await self._backend()
        # Due now and due later are both stored `queued`: the store is asked for queued rows and this
        # keeps the ones asked for, reading on (at most SCAN_READS reads) until the page is full.
        timing = flt.status if flt.status in ("queued", "scheduled") else None
        status = JobStatus.QUEUED if timing else (JobStatus(flt.status) if flt.status else None)
        now = _now()
        rows: list[dict[str, Any]] = []
        before = decode_cursor(cursor)
        for _ in range(SCAN_READS if timing else 1):
            page = await backend.job_page(
                JobPageParams(
                    statuses=[status] if status else None,
                    queues=[flt.queue] if flt.queue else None,
                    job_name_prefix=(flt.name or "").strip() or None,
                    search=search,
                    before=before,
                    limit=limit - len(rows),
                )
            )
            for record in page.rows:
                row = mark_scheduled(record.to_dict(), now)
                if timing is None or (timing == "scheduled") == row["scheduled_later"]:
                    rows.append(row)
            before = page.next_cursor
            if before is None or len(rows) >= limit:
                break
        # A page the scan cap cut short says so; Next page carries on after the last row read.
        exact = before is None or len(rows) >= limit
        return Page(rows=rows, next_cursor=encode_cursor(before), exact=exact)

    async def job(self, job_id: str) -> JobDetail | None:
        """A job's full record, or its dead-letter row when it has moved there, with its progress and log."""
        row = await self.app.get_job(job_id)
        if row is not None and row.get("status") != "dead_letter":
            backend = await self.app.connected_backend()
            return JobDetail(
                job=row,
                dead_letter=False,
                trace_id=trace_id_of(row.get("trace_context")),
                progress=progress_view(row.get("progress")),
                progress_missing_role=None if has_role(backend, JobProgressStore) else PROGRESS_ROLE,
                log=await self.job_log(job_id),
            )
        dead = await self.app.dead_letter.get(job_id)
        if dead is not None:
            # A dead-letter row keeps the job's log but not its progress.
            return JobDetail(job=dead, dead_letter=True, trace_id=None, log=await self.job_log(job_id))
        return None

    async def job_log(self, job_id: str) -> JobLog:
        """What the job's handler logged (`app.get_job_logs`), or a `JobLog` naming the role the backend lacks."""
        if not has_role(await self.app.connected_backend(), JobLogStore):
            return JobLog(missing_role=LOG_ROLE)
        try:
            return job_log(await self.app.get_job_logs(job_id))
        except MissingBackendRoleError:
            return JobLog(missing_role=LOG_ROLE)

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

    async def dead_letter_rows(self, *, queue: str | None = None, name: str | None = None) -> list[dict[str, Any]]:
        """Every dead letter matching the filter, read page by page (what a bulk action acts on)."""
        rows: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = await self.dead_letters(queue=queue, name=name, cursor=cursor, limit=BULK_PAGE)
            rows.extend(page.rows)
            cursor = page.next_cursor
            if cursor is None:
                return rows

    async def dead_letter_ids(self, *, queue: str | None = None, name: str | None = None) -> tuple[list[str], bool]:
        """Ids of every dead letter matching the filter, read page by page; the bool is always True (all of them)."""
        return [row["id"] for row in await self.dead_letter_rows(queue=queue, name=name)], True

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
            status = w.status.value
            state = w.state or WORKER_STATES.get(status, status.upper())
            # A worker that stops itself always writes STOPPED; a stopped row with any other state (or none,
            # as registering leaves it) was stopped by stale recovery: the process died or went silent.
            lost = status == "stopped" and w.state != "STOPPED"
            shutdown = dict(w.last_shutdown) if w.last_shutdown else {}
            recovered = shutdown.get("recovered") is True
            # Recovery's own write stamps the heartbeat; the worker's last one is kept in its record.
            heartbeat = _parse_time(shutdown.get("last_heartbeat")) if recovered else None
            age = max(timedelta(0), now - (heartbeat or _aware(w.last_heartbeat)))
            views.append(
                WorkerView(
                    id=w.id,
                    hostname=w.hostname,
                    pid=w.pid,
                    queues=tuple(w.queues) if w.queues else None,
                    concurrency=w.concurrency,
                    state="LOST" if lost else state,
                    heartbeat_age=age,
                    stale=status != "stopped" and age > timeout,
                    started_at=_aware(w.started_at),
                    in_flight=held.get(w.id, []),
                    state_changed_at=None if w.state_changed_at is None else _aware(w.state_changed_at),
                    # Only the summary a worker wrote at its own STOPPED; recovery's part is shown apart.
                    last_shutdown=shutdown if "states" in shutdown else None,
                    lost=lost,
                    lost_in=(w.state or "RUNNING") if lost else None,
                    recovered_at=_parse_time(shutdown.get("recovered_at")) if recovered else None,
                    rescued=_rescued(shutdown.get("rescued")) if recovered else [],
                    job_versions=dict(sorted(w.job_versions.items())) if w.job_versions is not None else None,
                )
            )
        order = {"RUNNING": 0, "DRAINING": 1, "FORCE_TIMEOUT_PATH": 1, "WAIT_FOR_THREAD": 1, "STOPPED": 2, "LOST": 2}
        views.sort(key=lambda v: (order.get(v.state, 1), -v.started_at.timestamp()))
        return views

    async def paused_queues(self) -> dict[str, PausedQueue] | None:
        """The paused queues by name (one read, `app.paused_queues()`); None when the backend stores
        no pauses (no `QueuePauseStore`)."""
        if not has_role(await self.app.connected_backend(), QueuePauseStore):
            return None
        return {
            row["queue"]: PausedQueue(queue=row["queue"], reason=row["reason"], paused_at=_aware(row["paused_at"]))
            for row in await self.app.paused_queues()
        }

    async def worker(self, worker_id: str) -> WorkerView | None:
        return next((w for w in await self.workers() if w.id == worker_id), None)

    async def schedules(self) -> Schedules:
        """Every schedule in the store, in name order, through `app.scheduler.list()` (what `soniq inspect` shows)."""
        now = _now()
        late_after = timedelta(seconds=2 * float(self.app.settings.scheduler_poll_interval))
        if not has_role(self.app.backend, ScheduleStore):
            return Schedules(rows=[], late_after=late_after, missing_role="ScheduleStore")
        rows = []
        for view in await self.app.scheduler.list():
            next_run = _aware(view["next_run"])
            overdue = now - next_run
            cron = view["cron"]
            rows.append(
                ScheduleView(
                    name=view["name"],
                    job_name=view["job_name"],
                    queue=view["queue"],
                    trigger=f"cron {cron} ({view['timezone']})" if cron else f"every {view['schedule_value']}s",
                    paused=bool(view["paused"]),
                    next_run=next_run,
                    last_run=None if view["last_run"] is None else _aware(view["last_run"]),
                    run_count=int(view["run_count"]),
                    last_job_id=view["last_job_id"],
                    lateness=overdue if not view["paused"] and overdue > late_after else None,
                    orphaned=bool(view["orphaned"]),
                )
            )
        return Schedules(rows=rows, late_after=late_after)


def _rescued(value: Any) -> list[dict[str, Any]]:
    """The rows recovery recorded taking, each with `job_id`, `action` and `reason` (None when not given)."""
    if not isinstance(value, list):
        return []
    return [
        {"job_id": r["job_id"], "action": str(r.get("action", "")), "reason": r.get("reason") or None}
        for r in value
        if isinstance(r, dict) and isinstance(r.get("job_id"), str)
    ]


def status_values() -> Sequence[str]:
    return STATUSES
