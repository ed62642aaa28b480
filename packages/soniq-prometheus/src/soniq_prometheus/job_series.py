"""The per-job series, kept as plain counts and rendered only when scraped.

Every job start and end touches these, so they skip prometheus-client's per-sample
lock and validation: the hooks run on the worker's one event loop, and a scrape on the
server's thread reads a copy. A histogram's count is the sum of its buckets, so a
scrape never sees the two disagree.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

OTHER = "other"
"""The label value every queue or job name past the cap is counted under."""
DEFAULT_MAX_LABEL_VALUES = 100
"""Distinct `queue` values, and distinct `job_name` values, a sink gives series of their own."""
COLLAPSED_MEMORY = 10_000
"""Collapsed values are counted exactly up to this many; past it the count stays (it reads "at least")."""


class LabelCap:
    """The first `limit` distinct values of one label keep their name; later ones become `OTHER`."""

    __slots__ = ("collapsed", "kept", "limit")

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"max_label_values must be a whole number >= 1, got {limit!r}")
        self.limit = limit
        self.kept: set[str] = set()
        self.collapsed: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self.kept:
            return value
        if len(self.kept) < self.limit:
            self.kept.add(value)
            return value
        if len(self.collapsed) < COLLAPSED_MEMORY:
            self.collapsed.add(value)
        return OTHER


JobKey = tuple[str, str]
"""(queue, job_name)"""
EndKey = tuple[str, str, str]
"""(queue, job_name, status), or (queue, job_name, reason) for retries and dead letters"""


class JobSeries(Collector):
    """Kept per (queue, job_name) and per outcome, so a job's start and end are a dict lookup and a few
    increments; runs are grouped into `status_of` their outcome (0.1.0's vocabulary) when scraped."""

    def __init__(
        self,
        prefix: str,
        buckets: tuple[float, ...],
        status_of: Mapping[str, str],
        *,
        max_label_values: int = DEFAULT_MAX_LABEL_VALUES,
    ) -> None:
        self.prefix = prefix
        # Hostile or generated queue and job names must not grow the scrape without bound.
        self.queue_cap = LabelCap(max_label_values)
        self.name_cap = LabelCap(max_label_values)
        self.bounds = tuple(buckets) if buckets[-1] == float("inf") else (*buckets, float("inf"))
        # prometheus-client's spelling of `le`, so 0.1.0's series keep their bucket labels.
        self._le = tuple("+Inf" if bound == float("inf") else repr(float(bound)) for bound in self.bounds)
        self._status_of = status_of
        self._jobs: dict[JobKey, list[int]] = {}
        """Per key: [started, in progress]."""
        self._ends: dict[EndKey, list[float]] = {}
        """Per (queue, job_name, outcome): [sum of durations, then one count per bucket, not cumulative]."""
        self._running: dict[str, list[int]] = {}
        """Job id -> its key's [started, in progress], until the run ends."""
        self.retries: dict[EndKey, int] = {}
        """(queue, job_name, reason)"""
        self.dead_letters: dict[EndKey, int] = {}
        """(queue, job_name, reason)"""

    def labels(self, queue: str, job_name: str) -> JobKey:
        """The label values a job of `queue` and `job_name` is counted under (`OTHER` past the cap)."""
        return self.queue_cap(queue), self.name_cap(job_name)

    def start(self, job_id: str, queue: str, job_name: str) -> None:
        """`queue` and `job_name` as `labels` returned them."""
        counts = self._jobs.get((queue, job_name))
        if counts is None:
            counts = self._jobs[(queue, job_name)] = [0, 0]
        counts[0] += 1
        counts[1] += 1
        self._running[job_id] = counts

    def end(self, job_id: str, queue: str, job_name: str, outcome: str, duration: float) -> None:
        """`outcome` a `JobOutcome` (or the plain string 0.1.0's `record_job_end` passes)."""
        key = (queue, job_name, outcome)
        row = self._ends.get(key)
        if row is None:
            row = self._ends[key] = [0.0] * (len(self.bounds) + 1)
        row[1 + bisect_left(self.bounds, duration)] += 1
        row[0] += duration
        counts = self._running.pop(job_id, None)
        if counts is not None:
            counts[1] -= 1

    def status(self, outcome: str) -> str:
        text = str(getattr(outcome, "value", outcome))
        return self._status_of.get(text, text)

    def _by_status(self) -> dict[EndKey, list[float]]:
        rows: dict[EndKey, list[float]] = {}
        for (queue, job_name, outcome), row in self._ends.copy().items():
            snapshot = list(row)
            key = (queue, job_name, self.status(outcome))
            merged = rows.get(key)
            rows[key] = snapshot if merged is None else [a + b for a, b in zip(merged, snapshot, strict=True)]
        return rows

    def count(self, queue: str, job_name: str, status: str) -> int:
        row = self._by_status().get((queue, job_name, status))
        return int(sum(row[1:])) if row else 0

    def _families(self) -> tuple[CounterMetricFamily, CounterMetricFamily, HistogramMetricFamily, GaugeMetricFamily]:
        p = self.prefix
        job = ("queue", "job_name")
        return (
            CounterMetricFamily(f"{p}_jobs_started", "Jobs whose handler started.", labels=job),
            CounterMetricFamily(
                f"{p}_jobs_completed",
                "Job runs that ended, by status (done, failed, dead_letter, snoozed, nacked, lost, unwritten).",
                labels=(*job, "status"),
            ),
            HistogramMetricFamily(
                f"{p}_job_duration_seconds",
                "Wall-clock time from handler start to the run's end.",
                labels=(*job, "status"),
            ),
            GaugeMetricFamily(f"{p}_jobs_in_progress", "Jobs whose handler is running in this process.", labels=job),
        )

    def _reason_families(self) -> tuple[CounterMetricFamily, CounterMetricFamily]:
        p = self.prefix
        labels = ("queue", "job_name", "reason")
        return (
            CounterMetricFamily(
                f"{p}_job_retries", "Failed runs put back for another attempt, by reason.", labels=labels
            ),
            CounterMetricFamily(f"{p}_dead_letters", "Jobs moved to the dead-letter table, by reason.", labels=labels),
        )

    def _collapsed_family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            f"{self.prefix}_label_values_collapsed",
            f"Distinct queue or job_name values counted under {OTHER!r} because the label cap was reached "
            f"(exact up to {COLLAPSED_MEMORY}).",
            labels=("label",),
        )

    def describe(self) -> Iterator[Metric]:
        yield from self._families()
        yield from self._reason_families()
        yield self._collapsed_family()

    def collect(self) -> Iterator[Metric]:
        started, completed, duration, in_progress = self._families()
        for job_key, (started_count, running) in self._jobs.copy().items():
            started.add_metric(job_key, started_count)
            in_progress.add_metric(job_key, running)
        for key, snapshot in self._by_status().items():
            cumulative = 0.0
            buckets = []
            for le, hits in zip(self._le, snapshot[1:], strict=True):
                cumulative += hits
                buckets.append((le, cumulative))
            completed.add_metric(key, cumulative)
            duration.add_metric(key, buckets, snapshot[0])
        retries, dead_letters = self._reason_families()
        for key, value in self.retries.copy().items():
            retries.add_metric(key, value)
        for key, value in self.dead_letters.copy().items():
            dead_letters.add_metric(key, value)
        collapsed = self._collapsed_family()
        collapsed.add_metric(("queue",), len(self.queue_cap.collapsed))
        collapsed.add_metric(("job_name",), len(self.name_cap.collapsed))
        yield from (started, completed, duration, in_progress, retries, dead_letters, collapsed)
