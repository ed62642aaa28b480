"""`PrometheusMetricsSink`: soniq 0.1.0's four job series plus what operators of a worker need.

It is an observer first (the worker's events reach it through the ``soniq.observers``
bus) and keeps 0.1.0's `MetricsSink` methods, so ``Soniq(metrics_sink=sink)`` still works.
Every label is a queue, a job name or a small fixed vocabulary; never a job id or an argument.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from soniq.observers import (
    BaseObserver,
    JobEndEvent,
    JobStartEvent,
    NackEvent,
    RecoveryEvent,
    ScheduleFiredEvent,
    TransitionEvent,
    WorkerStartedEvent,
    WorkerState,
)
from soniq_prometheus.job_series import DEFAULT_MAX_LABEL_VALUES, JobSeries
from soniq_prometheus.queue_gauges import QueueGaugeCollector
from soniq_prometheus.server import MetricsServer

if TYPE_CHECKING:
    from soniq.observers import AppReads

logger = logging.getLogger("soniq_prometheus")

JOB_DURATION_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    float("inf"),
)
"""0.1.0's buckets: sub-100ms webhook calls through multi-minute batch jobs."""

SHUTDOWN_DURATION_BUCKETS: tuple[float, ...] = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

SCHEDULE_LATENESS_BUCKETS: tuple[float, ...] = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 21600.0, 86400.0)
"""From a scheduler tick's jitter to a catch-up firing for a due time a day old."""

# 0.1.0's `status` vocabulary is done | failed | dead_letter | snoozed; outcomes it did not have keep their name.
STATUS_OF_OUTCOME: dict[str, str] = {
    "done": "done",
    "retry": "failed",
    "timeout_retry": "failed",
    "dead_letter": "dead_letter",
    "snoozed": "snoozed",
    "nacked": "nacked",
    "lost": "lost",
    "unwritten": "unwritten",
}
RETRY_REASON_OF_OUTCOME: dict[str, str] = {"retry": "error", "timeout_retry": "timeout"}
_COUNTED_OUTCOMES = frozenset({*RETRY_REASON_OF_OUTCOME, "dead_letter"})

UNREPORTED_REASON = "unreported"
"""The dead-letter reason label when the sink is fed only through 0.1.0's `record_job_end`."""

SHUTDOWN_DRAINED = "drained"
SHUTDOWN_FORCED = "forced"
SHUTDOWN_WAITED_FOR_THREADS = "waited_for_threads"


def _text(value: Any) -> str:
    """A label value from a str or one of core's str-valued enums (`JobOutcome`, `RescueAction`, ...)."""
    return str(getattr(value, "value", value))


@dataclass
class _Shutdown:
    signal_at: float
    states: set[str] = field(default_factory=set)


class PrometheusMetricsSink(BaseObserver):
    """Prometheus series for jobs, nacks, shutdowns, stale recoveries, schedule firings and the queues.

    `registry=None` uses prometheus-client's global registry, as 0.1.0 did; the
    ``prometheus`` entry point gives each app a registry of its own. `port` (else the
    app's `metrics_port` setting) makes the worker serve ``/metrics`` from its start to
    STOPPED. Queue gauges are read from the store when scraped, at most once per
    `queue_cache_seconds`, in one grouped count of the queues.
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        prefix: str = "soniq",
        port: int | None = None,
        addr: str | None = None,
        queue_cache_seconds: float = 5.0,
        queue_read_timeout: float = 5.0,
        max_label_values: int = DEFAULT_MAX_LABEL_VALUES,
    ) -> None:
        self.registry = registry if registry is not None else REGISTRY
        self.prefix = prefix
        self.port = port
        self.addr = addr
        reg = self.registry
        job = ("queue", "job_name")
        self.jobs = JobSeries(prefix, JOB_DURATION_BUCKETS, STATUS_OF_OUTCOME, max_label_values=max_label_values)
        reg.register(self.jobs)
        self.nacks = Counter(
            f"{prefix}_nacks_total",
            "Rows handed back to queued on shutdown, by reason; written=false ones are left to stale recovery.",
            (*job, "reason", "written"),
            registry=reg,
        )
        self.shutdowns = Counter(
            f"{prefix}_shutdowns_total",
            "Worker shutdowns that reached STOPPED, by outcome (drained, forced, waited_for_threads).",
            ("outcome",),
            registry=reg,
        )
        self.shutdown_duration = Histogram(
            f"{prefix}_shutdown_duration_seconds",
            "Time from the stop request to STOPPED, by outcome.",
            ("outcome",),
            registry=reg,
            buckets=SHUTDOWN_DURATION_BUCKETS,
        )
        self.shutdown_transitions = Counter(
            f"{prefix}_shutdown_transitions_total",
            "Transitions of the shutdown state machine; visible while a shutdown is still under way.",
            ("from_state", "to_state"),
            registry=reg,
        )
        self.worker_state = Gauge(
            f"{prefix}_worker_state", "Workers of this process in each shutdown state.", ("state",), registry=reg
        )
        self.stale_recoveries = Counter(
            f"{prefix}_stale_recoveries_total",
            "Rows of stale workers this process's sweeps recovered, by action (release, requeue, dead_letter).",
            ("action",),
            registry=reg,
        )
        self.schedule_firings = Counter(
            f"{prefix}_schedule_firings_total",
            "Due times of periodic schedules this process enqueued; catch_up=true for ones missed during downtime.",
            ("schedule", "queue", "job_name", "catch_up"),
            registry=reg,
        )
        self.schedule_lateness = Histogram(
            f"{prefix}_schedule_lateness_seconds",
            "How long after its due time a schedule's job was enqueued.",
            ("schedule", "catch_up"),
            registry=reg,
            buckets=SCHEDULE_LATENESS_BUCKETS,
        )
        for state in WorkerState:
            self.worker_state.labels(state=state.value)
        self.queue_gauges = QueueGaugeCollector(
            prefix=prefix,
            cache_seconds=queue_cache_seconds,
            read_timeout=queue_read_timeout,
        )
        reg.register(self.queue_gauges)
        self.server: MetricsServer | None = None
        self._queues_seen: set[str] = set()
        self._shutdowns: dict[str, _Shutdown] = {}
        self._states: dict[str, str] = {}
        self._on_bus = False

    # -- wiring ----------------------------------------------------------------

    def attach(self, app: AppReads, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Read queue gauges from `app`'s store on `loop` (the running loop by default)."""
        self.queue_gauges.attach(app, loop or asyncio.get_running_loop())

    def on_worker_started(self, event: WorkerStartedEvent) -> None:
        self._on_bus = True
        self.attach(event.reads)
        self.queue_gauges.add_queues(event.queues or ())
        self._enter(event.worker_id, WorkerState.RUNNING.value)
        port = self.port if self.port is not None else event.settings.metrics_port
        # Loopback unless the sink's `addr` or the `metrics_host` setting says otherwise.
        addr = self.addr if self.addr is not None else getattr(event.settings, "metrics_host", "127.0.0.1")
        if port is not None and self.server is None:
            try:
                self.server = MetricsServer.start(self.registry, port=port, addr=addr)
            except OSError as exc:
                # The worker runs on without its endpoint: jobs matter more than their metrics.
                logger.error("cannot serve /metrics on %s:%d (metrics_port): %s", addr, port, exc)
                return
            logger.info("serving /metrics on %s:%d for worker %s", addr, self.server.port, event.worker_id)

    def stop_server(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.stop()

    def on_worker_stopped(self, worker_id: str) -> None:
        self.stop_server()
        self._shutdowns.pop(worker_id, None)
        if worker_id in self._states:
            # A worker that returned without reaching STOPPED (an internal error) no longer counts.
            self._enter(worker_id, WorkerState.STOPPED.value)

    # -- jobs ------------------------------------------------------------------

    # Called for every job: kept to a few dict operations (benchmarks/prometheus_overhead.py).

    def on_job_start(self, event: JobStartEvent) -> None:
        self._on_bus = True
        job = event.job
        self._start(job.id, job.queue, job.job_name)

    def on_job_end(self, event: JobEndEvent) -> None:
        job = event.job
        outcome = event.outcome
        queue, job_name = self.jobs.labels(job.queue, job.job_name)
        self.jobs.end(job.id, queue, job_name, outcome, event.duration)
        if outcome in _COUNTED_OUTCOMES:
            self._count_outcome(queue, job_name, _text(outcome), event.reason)

    def _start(self, job_id: str, queue: str, job_name: str) -> None:
        if queue not in self._queues_seen and len(self._queues_seen) < self.queue_gauges.max_queues:
            self._queues_seen.add(queue)
            self.queue_gauges.add_queues((queue,))
        self.jobs.start(job_id, *self.jobs.labels(queue, job_name))

    def _count_outcome(self, queue: str, job_name: str, outcome: str, reason: str | None) -> None:
        if outcome in RETRY_REASON_OF_OUTCOME:
            key = (queue, job_name, RETRY_REASON_OF_OUTCOME[outcome])
            self.jobs.retries[key] = self.jobs.retries.get(key, 0) + 1
        elif outcome == "dead_letter":
            # `reason` is a `DeadLetterReason` value; the 0.1.0 `record_job_end` call does not carry one.
            key = (queue, job_name, _text(reason) if reason else UNREPORTED_REASON)
            self.jobs.dead_letters[key] = self.jobs.dead_letters.get(key, 0) + 1

    # -- shutdown ----------------------------------------------------------------

    def on_nack(self, event: NackEvent) -> None:
        self._on_bus = True
        self._nack(event.queue, event.job_name, _text(event.reason), event.written)

    def _nack(self, queue: str, job_name: str, reason: str, written: bool) -> None:
        self.nacks.labels(*self.jobs.labels(queue, job_name), reason, "true" if written else "false").inc()

    def on_transition(self, event: TransitionEvent) -> None:
        self._on_bus = True
        signal_at = event.shutdown.signal_at if event.shutdown is not None else event.at
        self._transition(event.worker_id, _text(event.from_state), _text(event.to_state), event.at, signal_at)

    def _enter(self, worker_id: str, state: str) -> None:
        previous = self._states.pop(worker_id, None)
        if previous is not None:
            self.worker_state.labels(previous).dec()
        # A stopped worker is gone from the process: it is not counted, so the gauge never grows with restarts.
        if state != WorkerState.STOPPED.value:
            self._states[worker_id] = state
            self.worker_state.labels(state).inc()

    def _transition(self, worker_id: str, from_state: str, to_state: str, at: float, signal_at: float) -> None:
        self.shutdown_transitions.labels(from_state, to_state).inc()
        if worker_id not in self._states:
            self._states[worker_id] = from_state
            self.worker_state.labels(from_state).inc()
        self._enter(worker_id, to_state)
        shutdown = self._shutdowns.setdefault(worker_id, _Shutdown(signal_at=signal_at))
        shutdown.states.add(to_state)
        if to_state != WorkerState.STOPPED.value:
            return
        del self._shutdowns[worker_id]
        if WorkerState.WAIT_FOR_THREAD.value in shutdown.states:
            outcome = SHUTDOWN_WAITED_FOR_THREADS
        elif WorkerState.FORCE_TIMEOUT_PATH.value in shutdown.states:
            outcome = SHUTDOWN_FORCED
        else:
            outcome = SHUTDOWN_DRAINED
        self.shutdowns.labels(outcome).inc()
        self.shutdown_duration.labels(outcome).observe(max(0.0, at - shutdown.signal_at))
        self.stop_server()

    # -- stale recovery ------------------------------------------------------------

    def on_recovery(self, event: RecoveryEvent) -> None:
        self._on_bus = True
        self._recovered(_text(rescue.action) for rescue in event.rescues)

    def _recovered(self, actions: Iterable[str]) -> None:
        counts: dict[str, int] = {}
        for action in actions:
            counts[action] = counts.get(action, 0) + 1
        for action, count in counts.items():
            self.stale_recoveries.labels(action).inc(count)

    # -- periodic schedules ----------------------------------------------------------

    def on_schedule_fired(self, event: ScheduleFiredEvent) -> None:
        self._on_bus = True
        self._fired(event.schedule_name, event.queue, event.job_name, event.catch_up, event.late_seconds)

    def _fired(self, schedule: str, queue: str, job_name: str, catch_up: bool, late_seconds: float) -> None:
        flag = "true" if catch_up else "false"
        self.schedule_firings.labels(schedule, *self.jobs.labels(queue, job_name), flag).inc()
        self.schedule_lateness.labels(schedule, flag).observe(max(0.0, late_seconds))

    # -- soniq 0.1.0's MetricsSink methods -----------------------------------------
    # Used when the sink is passed as ``metrics_sink=``; once the observer bus feeds it, these are
    # ignored so that a sink wired both ways counts each event once.

    def record_job_start(self, *, job_id: str, job_name: str, queue: str) -> None:
        if not self._on_bus:
            self._start(job_id, queue, job_name)

    def record_job_end(self, *, job_id: str, job_name: str, queue: str, outcome: str, duration: float) -> None:
        if not self._on_bus:
            name = _text(outcome)
            queue, job_name = self.jobs.labels(queue, job_name)
            self.jobs.end(job_id, queue, job_name, name, duration)
            if name in _COUNTED_OUTCOMES:
                self._count_outcome(queue, job_name, name, None)

    def emit(self, event: str, fields: Mapping[str, Any]) -> None:
        if self._on_bus:
            return
        if event == "shutdown_nack":
            self._nack(
                str(fields.get("queue", "")),
                str(fields.get("job_name", "")),
                str(fields.get("reason", "")),
                bool(fields.get("written")),
            )
        elif event == "stale_recovery":
            actions = fields.get("actions")
            if isinstance(actions, Mapping):
                self._recovered(str(action) for action in actions.values())
        elif event == "schedule_fired":
            self._fired(
                str(fields.get("schedule", "")),
                str(fields.get("queue", "")),
                str(fields.get("job_name", "")),
                bool(fields.get("catch_up")),
                float(fields.get("late_seconds") or 0.0),
            )
        elif event == "worker_transition":
            now = time.time()
            worker_id = str(fields.get("worker_id", ""))
            signal_at = self._shutdowns[worker_id].signal_at if worker_id in self._shutdowns else now
            self._transition(worker_id, str(fields.get("from_state")), str(fields.get("to_state")), now, signal_at)

    # -- introspection ---------------------------------------------------------------

    def metric_names(self) -> set[str]:
        """Every series name this sink exports (as it appears in an exposition, counters with ``_total``)."""
        names: set[str] = set()
        for collector in (
            self.jobs,
            self.nacks,
            self.shutdowns,
            self.shutdown_transitions,
            self.worker_state,
            self.stale_recoveries,
            self.schedule_firings,
        ):
            for family in collector.describe():
                if family.type != "histogram":
                    names.add(f"{family.name}_total" if family.type == "counter" else family.name)
        for with_histograms in (self.jobs, self.shutdown_duration, self.schedule_lateness):
            for family in with_histograms.describe():
                if family.type == "histogram":
                    names.update(f"{family.name}{suffix}" for suffix in ("_bucket", "_count", "_sum"))
        names.update(family.name for family in self.queue_gauges.describe())
        return names


def create_observer(settings: Any = None) -> PrometheusMetricsSink:
    """The ``soniq.observers`` entry point: a sink over a registry of its own, per app."""
    return PrometheusMetricsSink(registry=CollectorRegistry())
