"""Every store read the dashboard makes, one async method per question a page asks.

Today each method is built from Soniq's public app API (`get_queue_stats`,
`list_jobs`, `get_job`, `dead_letter.list/get`) and the backend's
`list_workers()`. That API only has offset pagination, no name or time filter,
and no counts over time, so several answers are emulated with bounded scans
(`SCAN_BUDGET` rows at most per question) and say so through their `exact`
flags. Each method is meant to map 1:1 onto one backend protocol read in the
next protocol version; only this module changes then.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from soniq import Soniq

SCAN_BUDGET = 600
"""Most rows one emulated answer reads through the public API (decoding rows is the cost: ~0.3 ms each)."""
QUEUE_SAMPLE = 50
MAX_READS = 4
"""Most public reads one page of an unfiltered listing makes, whatever the cursor says."""
PAGE_SIZE = 50
STATUSES = ("queued", "processing", "done", "cancelled")
WINDOWS = (("last hour", timedelta(hours=1)), ("last day", timedelta(days=1)))
# soniq_workers.status mapped onto the shutdown state machine's names; the store knows no finer state yet.
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
    """False when a filter the public API lacks stopped at `SCAN_BUDGET` rows."""


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


@dataclass(frozen=True, slots=True)
class Schedules:
    configured: bool
    rows: list[dict[str, Any]]


def encode_cursor(offset: int, row: dict[str, Any], key: str) -> str:
    raw = json.dumps({"o": offset, "t": _aware(row[key]).isoformat(), "i": row["id"]})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> tuple[int, datetime, str] | None:
    if not cursor:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return int(data["o"]), _aware(datetime.fromisoformat(data["t"])), str(data["i"])
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


Fetch = Callable[[int, int], Awaitable[list[dict[str, Any]]]]


async def _keyset_page(fetch: Fetch, key: str, needle: str, cursor: str | None, limit: int) -> Page:
    """Keyset pagination over an offset-only listing, newest `key` first.

    The cursor holds the last shown row's ``(key, id)`` and the offset it was
    at. The next page is read from `limit` rows before that offset, and rows
    at or above the cursor's key are dropped, so rows inserted meanwhile never
    make a row repeat. At most `MAX_READS` reads (or `SCAN_BUDGET` rows with a
    name filter) are made; when they run out, the page says so
    (``exact=False``) and its cursor continues from where the scan stopped.
    """
    position = decode_cursor(cursor)
    offset = max(0, position[0] - limit) if position else 0
    rows: list[dict[str, Any]] = []
    scanned = reads = 0
    batch = 200 if needle else limit + 1
    exhausted = False
    while len(rows) <= limit:
        if scanned >= SCAN_BUDGET or (not needle and reads >= MAX_READS):
            break
        reads += 1
        chunk = await fetch(batch, offset)
        for index, row in enumerate(chunk):
            if position and (_aware(row[key]), row["id"]) >= (position[1], position[2]):
                continue
            if needle and needle not in str(row["job_name"]).lower():
                continue
            rows.append({**row, "_offset": offset + index})
        scanned += len(chunk)
        offset += len(chunk)
        if len(chunk) < batch:
            exhausted = True
            break
    page = rows[:limit]
    if len(rows) > limit:
        return Page(rows=page, next_cursor=encode_cursor(page[-1]["_offset"] + 1, page[-1], key))
    if exhausted:
        return Page(rows=page, next_cursor=None)
    # The budget ran out before a full page: carry on from where the scan stopped.
    last = page[-1] if page else None
    resume: str | None = None
    if last is not None:
        resume = encode_cursor(offset + limit, last, key)
    elif position is not None:
        resume = encode_cursor(offset + limit, {"id": position[2], key: position[1]}, key)
    return Page(rows=page, next_cursor=resume, exact=False)


class DashboardReads:
    """The dashboard's questions to the store (see the module docstring for what is emulated)."""

    def __init__(self, app: Soniq) -> None:
        self.app = app

    async def _workers_raw(self) -> list[Any]:
        backend = await self.app.connected_backend()
        return list(await backend.list_workers())

    async def queue_names(self) -> list[str]:
        """Queues known from registered jobs, workers and a bounded sample of rows (no public list yet)."""
        registry = self.app.registry
        names = {d.queue for d in (registry.get(n) for n in registry.names()) if d is not None}
        for worker in await self._workers_raw():
            names.update(worker.queues or ())
        names.update(row["queue"] for row in await self.app.list_jobs(limit=QUEUE_SAMPLE))
        names.update(row["queue"] for row in await self.app.dead_letter.list(limit=QUEUE_SAMPLE))
        return sorted(names)

    async def overview(self) -> Overview:
        totals = await self.app.get_queue_stats()
        queues = [(name, await self.app.get_queue_stats(queue=name)) for name in await self.queue_names()]
        windows = await self._windows()
        workers = await self._workers_raw()
        running = sum(1 for w in workers if w.status.value != "stopped")
        return Overview(
            totals=totals,
            queues=queues,
            windows=windows,
            oldest_queued_age=await self.oldest_queued_age(totals.get("queued", 0)),
            workers_running=running,
            workers_total=len(workers),
        )

    async def _windows(self) -> list[WindowCounts]:
        """Done and dead-lettered rows per window, from one read of the newest `SCAN_BUDGET` rows of each."""
        done_rows = await self.app.list_jobs(status="done", limit=SCAN_BUDGET)
        dead_rows = await self.app.dead_letter.list(limit=SCAN_BUDGET)
        exact = len(done_rows) < SCAN_BUDGET and len(dead_rows) < SCAN_BUDGET
        counts = []
        for label, span in WINDOWS:
            since = _now() - span
            done = sum(1 for row in done_rows if _aware(row["updated_at"]) >= since)
            failed = sum(1 for row in dead_rows if _aware(row["moved_to_dead_letter_at"]) >= since)
            counts.append(WindowCounts(label=label, done=done, failed=failed, exact=exact))
        return counts

    async def oldest_queued_age(self, queued: int) -> timedelta | None:
        """Age of the oldest queued row: the last row of the newest-first listing (an offset read today)."""
        if queued <= 0:
            return None
        rows = await self.app.list_jobs(status="queued", limit=1, offset=queued - 1)
        if not rows:
            return None
        return max(timedelta(0), _now() - _aware(rows[0]["created_at"]))

    async def jobs_page(self, flt: JobFilter, cursor: str | None = None, limit: int = PAGE_SIZE) -> Page:
        """Newest first, `limit` rows after `cursor`.

        Keyset pagination is emulated: the cursor holds the last row's
        ``(created_at, id)`` and the offset it was found at; the next page is
        read by offset from a little before that and rows at or above the key
        are dropped, so rows inserted meanwhile never repeat a row. A name
        filter or search by name scans at most `SCAN_BUDGET` rows.
        """
        if flt.search:
            found = await self.app.get_job(flt.search.strip())
            if found is not None:
                return Page(rows=[found], next_cursor=None)
        needle = (flt.name or flt.search or "").strip().lower()

        async def fetch(limit: int, offset: int) -> list[dict[str, Any]]:
            return await self.app.list_jobs(
                queue=flt.queue or None, status=flt.status or None, limit=limit, offset=offset
            )

        return await _keyset_page(fetch, "created_at", needle, cursor, limit)

    async def job(self, job_id: str) -> JobDetail | None:
        """A job's full record, or its dead-letter row when it has moved there."""
        row = await self.app.get_job(job_id)
        if row is not None:
            return JobDetail(job=row, dead_letter=False, trace_id=trace_id_of(row.get("trace_context")))
        dead = await self.app.dead_letter.get(job_id)
        if dead is not None:
            return JobDetail(job=dead, dead_letter=True, trace_id=None)
        return None

    async def dead_letters(
        self, *, queue: str | None = None, name: str | None = None, cursor: str | None = None, limit: int = PAGE_SIZE
    ) -> Page:
        """Most recently moved first; the same emulated keyset as `jobs_page`, on ``moved_to_dead_letter_at``."""
        needle = (name or "").strip().lower()

        async def fetch(limit: int, offset: int) -> list[dict[str, Any]]:
            return await self.app.dead_letter.list(queue=queue or None, limit=limit, offset=offset)

        return await _keyset_page(fetch, "moved_to_dead_letter_at", needle, cursor, limit)

    async def dead_letter_ids(self, *, queue: str | None = None, name: str | None = None) -> tuple[list[str], bool]:
        """Ids of every dead letter matching the filter, up to `SCAN_BUDGET`; True when that is all of them."""
        ids: list[str] = []
        cursor: str | None = None
        while len(ids) < SCAN_BUDGET:
            page = await self.dead_letters(queue=queue, name=name, cursor=cursor, limit=200)
            ids.extend(row["id"] for row in page.rows)
            cursor = page.next_cursor
            if cursor is None:
                return ids[:SCAN_BUDGET], page.exact
        return ids[:SCAN_BUDGET], False

    async def workers(self) -> list[WorkerView]:
        """Each worker row with its state name, heartbeat age, staleness and the rows it holds."""
        now = _now()
        timeout = timedelta(seconds=float(self.app.settings.heartbeat_timeout))
        live = [w for w in await self._workers_raw()]
        in_flight_cap = max(100, 2 * sum(w.concurrency for w in live if w.status.value != "stopped"))
        processing = await self.app.list_jobs(status="processing", limit=in_flight_cap)
        held: dict[str, list[str]] = {}
        for row in processing:
            if row.get("worker_id"):
                held.setdefault(row["worker_id"], []).append(row["id"])
        views = []
        for w in live:
            age = max(timedelta(0), now - _aware(w.last_heartbeat))
            status = w.status.value
            views.append(
                WorkerView(
                    id=w.id,
                    hostname=w.hostname,
                    pid=w.pid,
                    queues=tuple(w.queues) if w.queues else None,
                    concurrency=w.concurrency,
                    state=WORKER_STATES.get(status, status.upper()),
                    heartbeat_age=age,
                    stale=status != "stopped" and age > timeout,
                    started_at=_aware(w.started_at),
                    in_flight=held.get(w.id, []),
                )
            )
        order = {"RUNNING": 0, "DRAINING": 1, "STOPPED": 2}
        views.sort(key=lambda v: (order.get(v.state, 1), -v.started_at.timestamp()))
        return views

    async def schedules(self) -> Schedules:
        """Periodic jobs: none exist in this version of soniq-core."""
        return Schedules(configured=False, rows=[])


def status_values() -> Sequence[str]:
    return STATUSES
