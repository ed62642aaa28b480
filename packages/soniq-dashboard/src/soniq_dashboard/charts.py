"""The charts page's data: activity per minute over the last hour and day, and queue depth over time.

Nothing here reads the store. The activity series are the minute buckets the overview snapshot already
reads in its one `job_activity` call (one grouped read of the last day, served by the stores' indexes
on done and dead-lettered times), so drawing them costs no query. Queue depth over time is not kept
by any store; `DepthHistory` samples the per-queue ``queued`` counts each background refresh of that
snapshot reads anyway, into a ring of fixed size in this process's memory: the history starts when
the dashboard process did, and has gaps where nobody had a page open (no refresh ran then).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from soniq.backend import ActivityBucket
from soniq_dashboard.reads import Overview
from soniq_dashboard.snapshot import Refresher

VENDOR = Path(__file__).parent / "static" / "vendor" / "uplot"
"""uPlot's files, fetched at build time by the package's build hook (hatch_build.py)."""
VENDOR_FILES = ("uPlot.iife.min.js", "uPlot.min.css")

HOUR_BUCKETS = 60
"""The hour chart: the last 60 minute buckets (the newest one is the minute under way)."""
DAY_BUCKET_MINUTES = 10
"""The day chart sums the minute buckets in tens: 145 points instead of 1,441."""

DEPTH_CAPACITY = 720
"""Queue-depth samples kept; with `DEPTH_SPACING` they cover the last hour."""
DEPTH_SPACING = 5.0
"""At most one queue-depth sample every this many seconds (or every refresh, when refreshes are slower)."""
DEPTH_QUEUES = 50
"""Queues kept per sample, the deepest first: bounds the memory whatever the number of queues."""
CHART_QUEUES = 10
"""Queues drawn: the deepest over the kept history; the JSON says how many more there were."""
GAP_SAMPLES = 3
GAP_SECONDS = 60.0
"""A pause longer than this many sample spacings and seconds (nobody watching: no refresh ran) breaks the
line instead of bridging it."""


def library_present(vendor: Path | None = None) -> bool:
    """Whether uPlot's files are installed with the package (a build without npm has none)."""
    folder = VENDOR if vendor is None else vendor
    return all((folder / name).is_file() for name in VENDOR_FILES)


@dataclass(frozen=True, slots=True)
class DepthSample:
    at: float
    """Epoch seconds of the refresh that read the counts."""
    queued: dict[str, int]
    """Queue -> queued rows (scheduled ones included), for the deepest `DEPTH_QUEUES` queues; others were 0."""


class DepthHistory:
    """Per-queue depth at the background refreshes, in a bounded ring (this process's memory only)."""

    def __init__(
        self,
        *,
        capacity: int = DEPTH_CAPACITY,
        spacing: float = DEPTH_SPACING,
        max_queues: int = DEPTH_QUEUES,
    ) -> None:
        if capacity < 1 or spacing < 0 or max_queues < 1:
            raise ValueError("capacity and max_queues must be >= 1 and spacing >= 0")
        self.capacity = capacity
        self.spacing = spacing
        self.max_queues = max_queues
        self.started = datetime.now(UTC)
        self._samples: deque[DepthSample] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._samples)

    def record(self, at: datetime, queued: Mapping[str, int]) -> bool:
        """Keep a sample unless the last one is less than `spacing` old; True when kept."""
        stamp = at.timestamp()
        if self._samples and stamp - self._samples[-1].at < self.spacing:
            return False
        deepest = sorted(((n, q) for q, n in queued.items() if n > 0), key=lambda nq: (-nq[0], nq[1]))
        self._samples.append(DepthSample(stamp, {q: n for n, q in deepest[: self.max_queues]}))
        return True

    def series(self, max_queues: int = CHART_QUEUES) -> dict[str, Any]:
        """Times and one aligned list per queue (the deepest `max_queues`), a None point at each gap."""
        samples = list(self._samples)
        peak: dict[str, int] = {}
        for sample in samples:
            for queue, n in sample.queued.items():
                peak[queue] = max(peak.get(queue, 0), n)
        drawn = sorted(sorted(peak), key=lambda q: -peak[q])[:max_queues]
        times: list[float] = []
        lines: dict[str, list[int | None]] = {q: [] for q in sorted(drawn)}
        gap = max(self.spacing * GAP_SAMPLES, GAP_SECONDS)
        for i, sample in enumerate(samples):
            if i and sample.at - samples[i - 1].at > gap:
                # Between the two samples no refresh ran: a None point makes the chart break the line.
                times.append((sample.at + samples[i - 1].at) / 2)
                for line in lines.values():
                    line.append(None)
            times.append(sample.at)
            for queue, line in lines.items():
                line.append(sample.queued.get(queue, 0))
        return {
            "started": self.started.isoformat(),
            "spacing_seconds": self.spacing,
            "capacity": self.capacity,
            "t": times,
            "queues": lines,
            "more_queues": max(0, len(peak) - len(drawn)),
        }


def _sums(buckets: Sequence[ActivityBucket], width: int) -> list[ActivityBucket]:
    """Consecutive runs of `width` buckets summed into one, counted back from the newest: the newest run
    ends with the minute under way and is as wide as the others; only the oldest may be shorter."""
    out = []
    cuts = [0, *range(len(buckets) % width or width, len(buckets) + 1, width)]
    for start, end in itertools.pairwise(cuts):
        run = buckets[start:end]
        failed = [b.failed for b in run if b.failed is not None]
        out.append(
            ActivityBucket(
                start=run[0].start,
                done=sum(b.done for b in run),
                dead_lettered=sum(b.dead_lettered for b in run),
                failed=sum(failed) if len(failed) == len(run) else None,
            )
        )
    return out


def _window(label: str, buckets: Sequence[ActivityBucket], bucket_seconds: int) -> dict[str, Any]:
    recorded = bool(buckets) and all(b.failed is not None for b in buckets)
    return {
        "label": label,
        "bucket_seconds": bucket_seconds,
        "t": [_aware(b.start).timestamp() for b in buckets],
        "done": [b.done for b in buckets],
        "dead_lettered": [b.dead_lettered for b in buckets],
        "failed": [b.failed for b in buckets] if recorded else None,
    }


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def activity_series(activity: Sequence[ActivityBucket]) -> dict[str, Any]:
    """The hour (per minute) and the day (per `DAY_BUCKET_MINUTES`) from the snapshot's minute buckets."""
    minute = 60
    if len(activity) > 1:
        minute = round((_aware(activity[1].start) - _aware(activity[0].start)).total_seconds())
    per = max(1, math.ceil(DAY_BUCKET_MINUTES * 60 / max(1, minute)))
    return {
        "hour": _window("last hour", activity[-HOUR_BUCKETS:], minute),
        "day": _window("last day", _sums(activity, per), minute * per),
    }


def chart_data(overview: Overview, as_of: datetime, history: DepthHistory) -> dict[str, Any]:
    """Everything the charts page draws, as JSON-ready values (times in epoch seconds, UTC)."""
    return {
        "as_of": as_of.isoformat(),
        "activity": activity_series(overview.activity),
        "depth": history.series(),
    }


class _Host(Protocol):
    """What the charts need of the dashboard (its `Dashboard`): the overview snapshot and the page renderer."""

    overview_snapshot: Refresher[Overview]

    def render(self, request: Request, template: str, page: str, **context: Any) -> Response: ...


class Charts:
    """The charts page and its JSON, fed by the overview snapshot and the queue-depth ring it fills."""

    def __init__(self, poll_interval: float) -> None:
        # One sample per refresh at most, and no more often than DEPTH_SPACING: the ring covers the last hour.
        self.history = DepthHistory(spacing=max(DEPTH_SPACING, poll_interval))

    def sampling(self, load: Callable[[], Awaitable[Overview]]) -> Callable[[], Awaitable[Overview]]:
        """`load` (the overview snapshot's read) that also records the per-queue depths it read."""

        async def load_and_sample() -> Overview:
            overview = await load()
            queued = {queue: counts.get("queued", 0) for queue, counts in overview.queues}
            self.history.record(datetime.now(UTC), queued)
            return overview

        return load_and_sample

    def routes(self, host: _Host, headers: Mapping[str, str]) -> list[BaseRoute]:
        """``/charts``, the page, and ``/charts/data``, its series as JSON (read-only: GET only)."""

        async def page(request: Request) -> Response:
            snapshot = await host.overview_snapshot.get()
            return host.render(
                request,
                "charts.html",
                "charts",
                overview=snapshot.value,
                as_of=snapshot.as_of,
                library=library_present(),
                depth=self.history,
                chart_queues=CHART_QUEUES,
            )

        async def data(request: Request) -> Response:
            snapshot = await host.overview_snapshot.get()
            body = chart_data(snapshot.value, snapshot.as_of, self.history)
            return JSONResponse(body, headers={**headers, "cache-control": "no-store"})

        return [Route("/charts", page, name="charts"), Route("/charts/data", data, name="charts_data")]
