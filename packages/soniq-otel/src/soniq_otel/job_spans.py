"""Job spans by the OpenTelemetry messaging conventions.

Enqueue opens a PRODUCER span ``send <queue>`` and writes its W3C context
into the row (`trace_context`) through the global propagator. Processing
opens a CONSUMER span ``process <queue>`` whose parent is that context, so a
job joins its producer's trace (and, as the conventions ask, links to it),
and attaches it as the current context: the worker creates the handler's
task, or copies the context into the handler's thread, only after
`on_job_start` returns, so spans the handler starts are children of it.
"""

from __future__ import annotations

from contextvars import Token
from dataclasses import dataclass

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, Tracer

from soniq.errors import SoniqError
from soniq.observers import EnqueueEvent, HandlerKind, JobEndEvent, JobOutcome, JobStartEvent, redact_text
from soniq_otel import attributes as a

FAILED_OUTCOMES = frozenset(outcome for outcome in JobOutcome if outcome.failed)
"""Outcomes that set the consumer span's status to ERROR: core's own `JobOutcome.failed`.
A nack is not one: the worker gave the job up, the job did not fail (its attempts are kept)."""

MAX_SCRUBBED_MESSAGE = 500


def scrubbed_message(error: BaseException) -> str:
    """Soniq's own messages (written never to quote job data), passwords masked; no foreign message at all."""
    if isinstance(error, SoniqError):
        text = redact_text(str(error))
        return text if len(text) <= MAX_SCRUBBED_MESSAGE else text[:MAX_SCRUBBED_MESSAGE] + "..."
    return "message withheld: the store's error text may quote parameter values"


MAX_OPEN_SENDS = 10_000
"""Producer spans whose enqueue never reported its end are ended after this many, oldest first."""


def error_type(error: BaseException) -> str:
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


@dataclass
class _Processing:
    span: Span
    token: Token[Context] | None
    worker_id: str


class JobTracing:
    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._sending: dict[str, Span] = {}
        self._processing: dict[str, _Processing] = {}
        self._nacked: dict[str, tuple[str, SpanContext]] = {}
        """Consumer spans that ended as ``nacked`` and wait for the nack span to link to them."""

    # -- producer ------------------------------------------------------------------

    def send_started(self, event: EnqueueEvent) -> dict[str, str] | None:
        span = self._tracer.start_span(
            f"{a.OPERATION_SEND} {event.queue}",
            kind=SpanKind.PRODUCER,
            attributes={
                a.MESSAGING_SYSTEM: a.MESSAGING_SYSTEM_SONIQ,
                a.MESSAGING_OPERATION_TYPE: a.OPERATION_SEND,
                a.MESSAGING_DESTINATION_NAME: event.queue,
            },
        )
        if span.is_recording():
            span.set_attributes(
                {
                    a.MESSAGING_OPERATION_NAME: a.OPERATION_SEND,
                    a.MESSAGING_MESSAGE_ID: event.job_id,
                    a.JOB_NAME: event.job_name,
                }
            )
            self._sending[event.job_id] = span
            if len(self._sending) > MAX_OPEN_SENDS:
                self._end_oldest_send()
        # Without an SDK the span is a pass-through of the caller's context, which is still worth carrying.
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        return carrier or None

    def send_ended(self, event: EnqueueEvent, error: BaseException | None) -> None:
        span = self._sending.pop(event.job_id, None)
        if span is None:
            return
        if error is not None:
            # Not record_exception: its message and stack text would carry a driver's message, which
            # quotes the query's parameter values (the job's arguments) into the tracing backend.
            message = scrubbed_message(error)
            span.add_event(
                "exception",
                {
                    "exception.type": f"{type(error).__module__}.{type(error).__qualname__}",
                    "exception.message": message,
                },
            )
            span.set_attribute(a.ERROR_TYPE, error_type(error))
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {message}"))
        span.end()

    def _end_oldest_send(self) -> None:
        oldest = next(iter(self._sending))
        span = self._sending.pop(oldest)
        span.set_status(Status(StatusCode.ERROR, "the enqueue never reported its end"))
        span.end()

    # -- consumer --------------------------------------------------------------------

    def process_started(self, event: JobStartEvent) -> None:
        job = event.job
        # From an empty context, so a job is never the child of whatever ran before it on this task.
        parent = propagate.extract(dict(job.trace_context), context=Context()) if job.trace_context else Context()
        producer = trace.get_current_span(parent).get_span_context()
        span = self._tracer.start_span(
            f"{a.OPERATION_PROCESS} {job.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=[Link(producer)] if producer.is_valid else (),
            attributes={
                a.MESSAGING_SYSTEM: a.MESSAGING_SYSTEM_SONIQ,
                a.MESSAGING_OPERATION_TYPE: a.OPERATION_PROCESS,
                a.MESSAGING_DESTINATION_NAME: job.queue,
            },
        )
        if span.is_recording():
            span.set_attributes(
                {
                    a.MESSAGING_OPERATION_NAME: a.OPERATION_PROCESS,
                    a.MESSAGING_MESSAGE_ID: job.id,
                    a.MESSAGING_CLIENT_ID: event.worker_id,
                    a.JOB_NAME: job.job_name,
                    a.JOB_ATTEMPT: event.attempt,
                    a.JOB_MAX_ATTEMPTS: job.max_attempts,
                    a.JOB_HANDLER_KIND: HandlerKind(event.handler_kind).value,
                    a.WORKER_ID: event.worker_id,
                }
            )
        elif not span.get_span_context().is_valid:
            return  # nothing recorded and nothing to carry on: leave the handler's context alone
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        self._processing[job.id] = _Processing(span=span, token=token, worker_id=event.worker_id)

    def process_ended(self, event: JobEndEvent) -> None:
        entry = self._processing.pop(event.job.id, None)
        if entry is None:
            return
        if entry.token is not None:
            # on_job_end runs in the job's task, the same context on_job_start attached to.
            otel_context.detach(entry.token)
        span = entry.span
        if span.is_recording():
            self._record_outcome(span, event)
            if event.outcome is JobOutcome.NACKED:
                self._nacked[event.job.id] = (event.worker_id, span.get_span_context())
        span.end()

    def _record_outcome(self, span: Span, event: JobEndEvent) -> None:
        outcome = JobOutcome(event.outcome).value
        span.set_attribute(a.JOB_OUTCOME, outcome)
        if event.error_text:
            span.set_attribute(a.JOB_ERROR, event.error_text)
        if outcome != JobOutcome.DONE.value:
            event_attrs: dict[str, str | int] = {a.JOB_OUTCOME: outcome, a.JOB_ATTEMPT: event.attempt}
            if event.error_text:
                event_attrs[a.JOB_ERROR] = event.error_text
            span.add_event(a.EVENT_JOB_OUTCOME_PREFIX + outcome, attributes=event_attrs)
        if JobOutcome(outcome) in FAILED_OUTCOMES:
            if event.error is not None:
                span.record_exception(event.error)
            span.set_attribute(a.ERROR_TYPE, error_type(event.error) if event.error is not None else outcome)
            description = event.error_text or (
                f"{type(event.error).__name__}: {event.error}" if event.error is not None else outcome
            )
            span.set_status(Status(StatusCode.ERROR, description))

    # -- links and clean-up ------------------------------------------------------------

    def nack_links(self, job_id: str) -> list[Link]:
        """A link to the consumer span of a job being nack'd, when this process ran it."""
        nacked = self._nacked.pop(job_id, None)
        if nacked is not None:
            return [Link(nacked[1])]
        entry = self._processing.get(job_id)
        if entry is not None and entry.span.get_span_context().is_valid:
            return [Link(entry.span.get_span_context())]
        return []

    def abandon(self, worker_id: str) -> None:
        """The worker stopped: end what it never reported an end for (its tasks are gone)."""
        for job_id in [j for j, e in self._processing.items() if e.worker_id == worker_id]:
            span = self._processing.pop(job_id).span
            span.set_attribute(a.JOB_OUTCOME, JobOutcome.UNFINISHED.value)
            span.set_status(Status(StatusCode.ERROR, "the worker stopped before the job's end was reported"))
            span.end()
        for job_id in [j for j, (w, _) in self._nacked.items() if w == worker_id]:
            del self._nacked[job_id]
