"""The shutdown trace: one `soniq.worker.shutdown` span, a transition span per state change.

A transition span covers the time spent in its `from_state`: the first one
(RUNNING -> DRAINING) starts at the signal, each later one at the transition
before it, and each ends at its own transition. So a span is written, with
explicit start and end times, when its transition arrives; notices that
happen inside a state (the sync grace expiring) are kept until then and
become events on the span that covers that state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from soniq.observers import NackEvent, ShutdownInfo, ShutdownNotice, TransitionEvent, WorkerState
from soniq_otel import attributes as a

Attributes = dict[str, AttributeValue]

# Notice fields that have a name of their own; others become `soniq.shutdown.<field>`.
_NOTICE_FIELD_KEYS: dict[str, str] = {
    "job_ids": a.SHUTDOWN_WAITING_JOB_IDS,
    "grace_seconds": a.SHUTDOWN_SYNC_GRACE,
}


def to_ns(seconds: float) -> int:
    """`time.time()` seconds to the integer nanoseconds OpenTelemetry timestamps use."""
    return int(seconds * 1_000_000_000)


def attribute_value(value: Any) -> AttributeValue:
    """Anything a notice carries, as a value a span attribute may hold."""
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
        if all(isinstance(item, bool) for item in items):
            return [bool(item) for item in items]
        if all(isinstance(item, int) and not isinstance(item, bool) for item in items):
            return [int(item) for item in items]
        if all(isinstance(item, (int, float)) and not isinstance(item, bool) for item in items):
            return [float(item) for item in items]
        return [str(item) for item in items]
    return str(value)


@dataclass
class _StateSpell:
    """The state the worker is in now, and what will go on the span that closes it."""

    state: WorkerState
    entered_ns: int
    events: list[tuple[str, Attributes, int]] = field(default_factory=list)
    attributes: Attributes = field(default_factory=dict)


@dataclass
class _ShutdownTrace:
    worker_id: str
    span: Span
    context: Context
    current: _StateSpell
    states: list[str]
    nacked: list[str] = field(default_factory=list)


def shutdown_attributes(info: ShutdownInfo | None, worker_id: str) -> Attributes:
    attrs: Attributes = {a.WORKER_ID: worker_id}
    if info is None:
        return attrs
    attrs.update(
        {
            a.SHUTDOWN_TRIGGER: info.trigger,
            a.SHUTDOWN_TIMEOUT: float(info.shutdown_timeout),
            a.SHUTDOWN_SYNC_GRACE: float(info.sync_handler_grace_seconds),
            a.SHUTDOWN_PREFETCH_RELEASE_TIMEOUT: float(info.prefetch_release_timeout),
            a.SHUTDOWN_IN_FLIGHT_ASYNC: info.in_flight_async,
            a.SHUTDOWN_IN_FLIGHT_SYNC: info.in_flight_sync,
            a.SHUTDOWN_PREFETCHED: info.prefetched,
        }
    )
    if info.job_timeout is not None:
        attrs[a.SHUTDOWN_JOB_TIMEOUT] = float(info.job_timeout)
    return attrs


class ShutdownTracing:
    """Turns one worker's transitions, notices and nacks into its shutdown trace."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._traces: dict[str, _ShutdownTrace | None] = {}
        """By worker id; None marks a shutdown whose root span is not sampled."""

    def transition(self, event: TransitionEvent) -> None:
        if event.worker_id not in self._traces:
            self._traces[event.worker_id] = self._begin(event)
        shutdown = self._traces[event.worker_id]
        if shutdown is None:
            if event.to_state is WorkerState.STOPPED:
                del self._traces[event.worker_id]
            return
        at_ns = to_ns(event.at)
        self._close_spell(shutdown, event, at_ns)
        shutdown.states.append(event.to_state.value)
        if event.to_state is WorkerState.STOPPED:
            nacked = list(event.nacked_job_ids) or shutdown.nacked
            shutdown.span.set_attributes(
                {
                    a.SHUTDOWN_NACKED_JOB_IDS: nacked,
                    a.SHUTDOWN_NACKED_COUNT: len(nacked),
                    a.SHUTDOWN_STATES: shutdown.states,
                }
            )
            shutdown.span.end(end_time=at_ns)
            del self._traces[event.worker_id]
            return
        shutdown.current = _StateSpell(state=event.to_state, entered_ns=at_ns)
        if event.waiting_threads:
            shutdown.current.attributes[a.SHUTDOWN_WAITING_JOB_IDS] = list(event.waiting_threads)

    def notice(self, event: ShutdownNotice) -> None:
        shutdown = self._traces.get(event.worker_id)
        if shutdown is None:
            return
        attrs: Attributes = {a.WORKER_ID: event.worker_id}
        for key, value in event.fields.items():
            attrs[_NOTICE_FIELD_KEYS.get(key, a.SHUTDOWN_NOTICE_PREFIX + key)] = attribute_value(value)
        shutdown.current.events.append((a.SHUTDOWN_NOTICE_PREFIX + event.name, attrs, to_ns(event.at)))

    def nack(self, event: NackEvent, links: Sequence[Link] = ()) -> None:
        shutdown = self._traces.get(event.worker_id)
        if event.worker_id in self._traces and shutdown is None:
            return  # the shutdown is not sampled, so neither are its children
        parent = shutdown.context if shutdown is not None else Context()
        end_ns = to_ns(event.at)
        # A future core may say when the write began; until then the span marks the moment it ended.
        began = getattr(event, "started_at", None)
        start_ns = min(to_ns(began), end_ns) if isinstance(began, (int, float)) else end_ns
        span = self._tracer.start_span(
            a.SPAN_JOB_NACK,
            context=parent,
            kind=SpanKind.INTERNAL,
            links=links,
            start_time=start_ns,
            attributes={a.MESSAGING_MESSAGE_ID: event.job_id, a.NACK_REASON: event.reason},
        )
        if span.is_recording():
            span.set_attributes(
                {
                    a.NACK_WRITTEN: event.written,
                    a.WORKER_ID: event.worker_id,
                    a.JOB_NAME: event.job_name,
                    a.MESSAGING_SYSTEM: a.MESSAGING_SYSTEM_SONIQ,
                    a.MESSAGING_DESTINATION_NAME: event.queue,
                }
            )
            if event.error:
                span.set_attribute(a.NACK_ERROR, event.error)
                span.set_status(Status(StatusCode.ERROR, event.error))
        span.end(end_time=end_ns)
        if shutdown is not None and event.written:
            shutdown.nacked.append(event.job_id)

    def abandon(self, worker_id: str, at: float) -> None:
        """The worker returned without reaching STOPPED (its shutdown raised): end what is open."""
        shutdown = self._traces.pop(worker_id, None)
        if shutdown is None:
            return
        at_ns = to_ns(at)
        spell = shutdown.current
        span = self._transition_span(shutdown, spell, spell.state, None, at_ns, reason="")
        span.set_status(Status(StatusCode.ERROR, "the worker stopped before reaching STOPPED"))
        span.end(end_time=at_ns)
        shutdown.span.set_attributes({a.SHUTDOWN_NACKED_JOB_IDS: shutdown.nacked, a.SHUTDOWN_STATES: shutdown.states})
        shutdown.span.set_status(Status(StatusCode.ERROR, "the worker stopped before reaching STOPPED"))
        shutdown.span.end(end_time=at_ns)

    # -- internals ---------------------------------------------------------------

    def _begin(self, event: TransitionEvent) -> _ShutdownTrace | None:
        info = event.shutdown
        signal_ns = to_ns(info.signal_at) if info is not None else to_ns(event.at)
        # A shutdown is its own trace: never a child of whatever span the worker was started under.
        span = self._tracer.start_span(
            a.SPAN_WORKER_SHUTDOWN,
            context=Context(),
            kind=SpanKind.INTERNAL,
            start_time=signal_ns,
            attributes=shutdown_attributes(info, event.worker_id),
        )
        if not span.is_recording():
            return None
        return _ShutdownTrace(
            worker_id=event.worker_id,
            span=span,
            context=trace.set_span_in_context(span, Context()),
            current=_StateSpell(state=event.from_state, entered_ns=min(signal_ns, to_ns(event.at))),
            states=[event.from_state.value],
        )

    def _close_spell(self, shutdown: _ShutdownTrace, event: TransitionEvent, at_ns: int) -> None:
        span = self._transition_span(shutdown, shutdown.current, event.from_state, event.to_state, at_ns, event.reason)
        if event.waiting_threads:
            span.set_attribute(a.SHUTDOWN_WAITING_JOB_IDS, list(event.waiting_threads))
        span.end(end_time=at_ns)

    def _transition_span(
        self,
        shutdown: _ShutdownTrace,
        spell: _StateSpell,
        from_state: WorkerState,
        to_state: WorkerState | None,
        at_ns: int,
        reason: str,
    ) -> Span:
        attrs: Attributes = {a.WORKER_ID: shutdown.worker_id, a.SHUTDOWN_FROM_STATE: from_state.value}
        if to_state is not None:
            attrs[a.SHUTDOWN_TO_STATE] = to_state.value
        if reason:
            attrs[a.SHUTDOWN_REASON] = reason
        attrs.update(spell.attributes)
        span = self._tracer.start_span(
            a.SPAN_SHUTDOWN_TRANSITION,
            context=shutdown.context,
            kind=SpanKind.INTERNAL,
            start_time=min(spell.entered_ns, at_ns),
            attributes=attrs,
        )
        for name, event_attrs, event_ns in spell.events:
            span.add_event(name, attributes=event_attrs, timestamp=event_ns)
        return span
