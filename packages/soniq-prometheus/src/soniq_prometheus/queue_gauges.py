"""Queue and worker gauges read from the store when Prometheus scrapes, at a bounded cost.

A scrape arrives on the HTTP server's thread while the store's client lives on the
worker's event loop, so the reads are handed to that loop and awaited with a deadline.
One refresh serves every scrape for `cache_seconds`; a refresh costs one worker listing
and one grouped count of the known queues (at most `max_queues`), the `job_counts` read of
the backend role `OperatorReads`: due and scheduled counts and the oldest due job's age,
exact at any depth, the same figures the dashboard shows. On a backend without that role it
costs one `get_queue_stats` per queue instead: every queued row counts as due now
(``scheduled`` 0) and no oldest age is reported. On a backend with the role `QueuePauseStore`
the same refresh reads the stored pauses (one more read) for ``soniq_queue_paused``: 1 per
paused queue (at most `max_queues` of them); without the role the gauge has no series.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from soniq.backend import JobCountsParams, OperatorReads, QueuePauseStore, has_role

if TYPE_CHECKING:
    from soniq.observers import AppReads

logger = logging.getLogger("soniq_prometheus")

WORKER_STATUSES = ("active", "stopping", "stopped")
QUEUE_STATES = ("queued", "scheduled", "processing")


@dataclass
class QueueSnapshot:
    jobs: dict[tuple[str, str], int] = field(default_factory=dict)
    """(queue, state) -> rows; state is queued (due now), scheduled (due later) or processing."""
    oldest_age: dict[str, float] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)
    paused: tuple[str, ...] = ()
    """The paused queues (`QueuePauseStore`), sorted; empty without the role."""
    up: bool = False
    read_at: float | None = None
    """`time.monotonic()` of the read; None before the first."""

    def fresh(self, cache_seconds: float) -> bool:
        return self.read_at is not None and time.monotonic() - self.read_at < cache_seconds


class QueueGaugeCollector(Collector):
    def __init__(
        self,
        *,
        prefix: str = "soniq",
        cache_seconds: float = 5.0,
        read_timeout: float = 5.0,
        max_queues: int = 100,
    ) -> None:
        self.prefix = prefix
        self.cache_seconds = cache_seconds
        self.read_timeout = read_timeout
        self.max_queues = max_queues
        self.reads = 0
        """Refreshes started so far (each one bounded as the module says)."""
        self._app: AppReads | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._queues: set[str] = set()
        self._snapshot = QueueSnapshot()
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        """Held by the scrape that reads the store; scrapes arriving meanwhile wait and reuse its result."""
        self._refreshing: asyncio.Task[None] | None = None

    def attach(self, app: AppReads, loop: asyncio.AbstractEventLoop) -> None:
        self._app = app
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._snapshot = QueueSnapshot()
        self.add_queues(d.queue for d in (app.registry.get(n) for n in app.registry.names()) if d is not None)

    def add_queues(self, queues: Iterable[str]) -> None:
        for queue in queues:
            if queue not in self._queues and len(self._queues) < self.max_queues:
                self._queues.add(queue)

    def is_fresh(self) -> bool:
        """True while the last store read still serves scrapes (within `cache_seconds`)."""
        with self._lock:
            return self._snapshot.fresh(self.cache_seconds)

    # -- reading -------------------------------------------------------------------

    async def refresh(self) -> None:
        """Read the store now (on the app's loop); the next scrapes reuse the result."""
        app = self._app
        if app is None:
            return
        self.reads += 1
        snapshot = QueueSnapshot(read_at=time.monotonic())
        backend = await app.connected_backend()
        for worker in await backend.list_workers():
            status = str(getattr(worker.status, "value", worker.status))
            snapshot.workers[status] = snapshot.workers.get(status, 0) + 1
        now = datetime.now(UTC)
        queues = sorted(self._queues)
        if has_role(backend, OperatorReads):
            reads = cast(OperatorReads, backend)
            for counts in await reads.job_counts(JobCountsParams(queues=queues)):
                queue = counts.queue
                snapshot.jobs[(queue, "queued")] = max(0, counts.queued - counts.scheduled)
                snapshot.jobs[(queue, "scheduled")] = counts.scheduled
                snapshot.jobs[(queue, "processing")] = counts.processing
                oldest = counts.oldest_due_at
                snapshot.oldest_age[queue] = max(0.0, (now - oldest).total_seconds()) if oldest else 0.0
        else:
            for queue in queues:
                stats = await app.get_queue_stats(queue=queue)
                snapshot.jobs[(queue, "queued")] = stats["queued"]
                snapshot.jobs[(queue, "scheduled")] = 0
                snapshot.jobs[(queue, "processing")] = stats["processing"]
        if has_role(backend, QueuePauseStore):
            pauses = cast(QueuePauseStore, backend)
            snapshot.paused = tuple(sorted(row.queue for row in await pauses.paused_queues())[: self.max_queues])
        snapshot.up = True
        with self._lock:
            self._snapshot = snapshot

    def _current(self) -> QueueSnapshot:
        with self._lock:
            snapshot = self._snapshot
        loop = self._loop
        if loop is None or self._app is None or snapshot.fresh(self.cache_seconds):
            return snapshot
        if loop.is_closed() or not loop.is_running():
            return snapshot
        if threading.get_ident() == self._loop_thread:
            # Scraped from the loop itself (an in-process endpoint): blocking here would deadlock,
            # so serve what is cached and refresh in the background for the next scrape.
            if self._refreshing is None or self._refreshing.done():
                self._refreshing = loop.create_task(self._refresh_logged())
            return snapshot
        with self._refresh_lock:
            with self._lock:
                if self._snapshot.fresh(self.cache_seconds):
                    return self._snapshot
            future = asyncio.run_coroutine_threadsafe(self.refresh(), loop)
            try:
                future.result(timeout=self.read_timeout)
            except concurrent.futures.TimeoutError:
                future.cancel()
                logger.warning("queue gauges: the store did not answer within %gs", self.read_timeout)
                self._mark_down()
            except Exception as exc:
                logger.warning("queue gauges: reading the store failed: %s", exc)
                self._mark_down()
            with self._lock:
                return self._snapshot

    async def _refresh_logged(self) -> None:
        try:
            await asyncio.wait_for(self.refresh(), self.read_timeout)
        except Exception as exc:
            logger.warning("queue gauges: reading the store failed: %s", exc)
            self._mark_down()

    def _mark_down(self) -> None:
        # Keep the last values (a gap would look like an empty queue) but say they are stale, and wait
        # a whole cache interval before asking a struggling store again.
        with self._lock:
            old = self._snapshot
            self._snapshot = QueueSnapshot(
                jobs=old.jobs,
                oldest_age=old.oldest_age,
                workers=old.workers,
                paused=old.paused,
                up=False,
                read_at=time.monotonic(),
            )

    # -- exposition ----------------------------------------------------------------

    def _families(
        self,
    ) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        p = self.prefix
        return (
            GaugeMetricFamily(
                f"{p}_queue_jobs",
                "Rows per queue: queued (due now), scheduled (due later), processing; read from the store.",
                labels=("queue", "state"),
            ),
            GaugeMetricFamily(
                f"{p}_queue_oldest_job_age_seconds",
                "Age since enqueue of the oldest queued job of the queue that is due; 0 when none is.",
                labels=("queue",),
            ),
            GaugeMetricFamily(
                f"{p}_workers", "Registered workers by status (active, stopping, stopped).", labels=("state",)
            ),
            GaugeMetricFamily(
                f"{p}_queue_gauges_up", "1 when the last read of the queue gauges from the store succeeded."
            ),
            GaugeMetricFamily(
                f"{p}_queue_paused",
                "1 for each paused queue (workers do not claim from it); read from the store.",
                labels=("queue",),
            ),
        )

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        snapshot = self._current()
        jobs, oldest, workers, up, paused = self._families()
        for (queue, state), count in sorted(snapshot.jobs.items()):
            jobs.add_metric((queue, state), count)
        for queue, age in sorted(snapshot.oldest_age.items()):
            oldest.add_metric((queue,), age)
        for status in WORKER_STATUSES:
            workers.add_metric((status,), snapshot.workers.get(status, 0))
        up.add_metric((), 1.0 if snapshot.up else 0.0)
        for queue in snapshot.paused:
            paused.add_metric((queue,), 1.0)
        yield from (jobs, oldest, workers, up, paused)
