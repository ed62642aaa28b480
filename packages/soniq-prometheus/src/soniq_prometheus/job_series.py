"""The per-job series, kept as plain counts and rendered only when scraped.

Every job start and end touches these, so they skip prometheus-client's per-sample
lock and validation: the hooks run on the worker's one event loop, and a scrape on the
server's thread reads a copy. A histogram's count is the sum of its buckets, so a
scrape never sees the two disagree.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

JobKey = tuple[str, str]
"""(queue, job_name)"""
EndKey = tuple[str, str, str]
"""(queue, job_name, status)"""


class JobSeries(Collector):
    def __init__(self, prefix: str, buckets: tuple[float, ...]) -> None:
        self.prefix = prefix
        self.bounds = tuple(buckets) if buckets[-1] == float("inf") else (*buckets, float("inf"))
        # prometheus-client's spelling of `le`, so 0.1.0's series keep their bucket labels.
        self._le = tuple("+Inf" if bound == float("inf") else repr(float(bound)) for bound in self.bounds)
        self.started: dict[JobKey, int] = {}
        self.in_progress: dict[JobKey, int] = {}
        self.ended: dict[EndKey, list[float]] = {}
        """Per key: [sum of durations, then one count per bucket, not cumulative]."""
        self.retries: dict[EndKey, int] = {}
        """(queue, job_name, reason)"""
        self.dead_letters: dict[EndKey, int] = {}
        """(queue, job_name, reason)"""
        self._running: dict[str, JobKey] = {}

    def start(self, job_id: str, key: JobKey) -> None:
        self.started[key] = self.started.get(key, 0) + 1
        self.in_progress[key] = self.in_progress.get(key, 0) + 1
        self._running[job_id] = key

    def end(self, job_id: str, key: EndKey, duration: float) -> None:
        row = self.ended.get(key)
        if row is None:
            row = self.ended[key] = [0.0] * (len(self.bounds) + 1)
        row[1 + bisect_left(self.bounds, duration)] += 1
        row[0] += duration
        running = self._running.pop(job_id, None)
        if running is not None:
            self.in_progress[running] -= 1

    def count(self, queue: str, job_name: str, status: str) -> int:
        row = self.ended.get((queue, job_name, status))
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

    def describe(self) -> Iterator[Metric]:
        yield from self._families()
        yield from self._reason_families()

    def collect(self) -> Iterator[Metric]:
        started, completed, duration, in_progress = self._families()
        for job_key, value in self.started.copy().items():
            started.add_metric(job_key, value)
        for job_key, value in self.in_progress.copy().items():
            in_progress.add_metric(job_key, value)
        for key, row in self.ended.copy().items():
            snapshot = list(row)
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
        yield from (started, completed, duration, in_progress, retries, dead_letters)
