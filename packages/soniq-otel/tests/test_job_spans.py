"""Producer and consumer spans, in-process on the memory backend."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from otel_testing import RunningWorker, Tracing, wait_until, with_observer

from soniq import Soniq
from soniq.errors import Snooze
from soniq_otel import SoniqTracingObserver, create_observer
from soniq_otel import attributes as a

pytestmark = pytest.mark.asyncio


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def run_until_done(app: Soniq, job_id: str) -> None:
    worker = RunningWorker(app)
    await wait_until(lambda: _status(app, job_id), timeout=10)
    await worker.stop()
    await worker.summary()


async def _status(app: Soniq, job_id: str) -> bool:
    row = await app.get_job(job_id)
    if row is None:  # dead-lettered rows leave soniq_jobs
        return True
    return row["status"] in ("done", "cancelled") or (row["status"] == "queued" and row["attempts"] > 0)


async def test_enqueue_opens_a_producer_span_and_stores_its_context_in_the_row(tracing: Tracing, app: Soniq) -> None:
    @app.job(queue="emails")
    async def send_email(to: str) -> None:
        return None

    job_id = await app.enqueue(send_email, to="a@example.com")

    send = tracing.one("send emails")
    assert send.kind is SpanKind.PRODUCER
    assert send.attributes is not None
    assert dict(send.attributes) == {
        a.MESSAGING_SYSTEM: "soniq",
        a.MESSAGING_OPERATION_TYPE: "send",
        a.MESSAGING_OPERATION_NAME: "send",
        a.MESSAGING_DESTINATION_NAME: "emails",
        a.MESSAGING_MESSAGE_ID: job_id,
        a.JOB_NAME: send.attributes[a.JOB_NAME],
    }
    assert str(send.attributes[a.JOB_NAME]).endswith("send_email")
    row = await app.get_job(job_id)
    assert row is not None
    context = send.get_span_context()
    assert context is not None
    version, trace_id, span_id, flags = row["trace_context"]["traceparent"].split("-")
    assert (version, trace_id, span_id) == ("00", f"{context.trace_id:032x}", f"{context.span_id:016x}")
    assert int(flags, 16) & 0x01  # sampled


async def test_a_job_is_traced_from_the_request_span_to_its_processing(tracing: Tracing, app: Soniq) -> None:
    seen: dict[str, Any] = {}

    @app.job
    async def work() -> None:
        seen["current"] = trace.get_current_span().get_span_context()

    tracer = tracing.provider.get_tracer("test.web")
    with tracer.start_as_current_span("POST /orders") as request:
        job_id = await app.enqueue(work)
    await run_until_done(app, job_id)

    request_ctx = request.get_span_context()
    send = tracing.one("send default")
    process = tracing.one("process default")
    assert process.kind is SpanKind.CONSUMER
    assert process.context is not None
    assert send.context is not None
    assert process.context.trace_id == request_ctx.trace_id
    assert parent_id(process) == send.context.span_id
    assert parent_id(send) == request_ctx.span_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert process.attributes is not None
    assert process.attributes[a.MESSAGING_MESSAGE_ID] == job_id
    assert process.attributes[a.MESSAGING_OPERATION_TYPE] == "process"
    assert process.attributes[a.JOB_ATTEMPT] == 1
    assert process.attributes[a.JOB_OUTCOME] == "done"
    assert process.status.status_code is StatusCode.UNSET
    # The handler ran with the consumer span current.
    assert seen["current"].span_id == process.context.span_id


async def test_spans_a_sync_handler_starts_are_children_of_the_consumer_span(tracing: Tracing, app: Soniq) -> None:
    tracer = tracing.provider.get_tracer("test.handler")
    threads: list[str] = []

    @app.job
    def resize(size: int) -> int:
        threads.append(threading.current_thread().name)
        with tracer.start_as_current_span("resize image"):
            return size * 2

    job_id = await app.enqueue(resize, size=3)
    await run_until_done(app, job_id)

    process = tracing.one("process default")
    inner = tracing.one("resize image")
    assert process.context is not None
    assert parent_id(inner) == process.context.span_id
    assert threads
    assert threads[0].startswith("soniq-sync")
    assert process.attributes is not None
    assert process.attributes[a.JOB_HANDLER_KIND] == "sync"


async def test_a_failure_is_recorded_and_each_retry_is_a_new_attempt(tracing: Tracing, app: Soniq) -> None:
    @app.job(max_retries=1)
    async def flaky() -> None:
        raise ValueError("card declined")

    job_id = await app.enqueue(flaky)
    worker = RunningWorker(app)
    await wait_until(lambda: len(tracing.spans("process default")) == 2, timeout=10)
    await worker.stop()
    await worker.summary()

    first, second = sorted(tracing.spans("process default"), key=lambda s: s.start_time or 0)
    for span, attempt, outcome in ((first, 1, "retry"), (second, 2, "dead_letter")):
        assert span.attributes is not None
        assert span.attributes[a.MESSAGING_MESSAGE_ID] == job_id
        assert span.attributes[a.JOB_ATTEMPT] == attempt
        assert span.attributes[a.JOB_OUTCOME] == outcome
        assert span.attributes[a.ERROR_TYPE] == "ValueError"
        assert span.status.status_code is StatusCode.ERROR
        assert "card declined" in str(span.status.description)
        names = [e.name for e in span.events]
        assert "exception" in names
        assert f"soniq.job.{outcome}" in names
    # Both runs belong to the producer's trace.
    send = tracing.one("send default")
    assert send.context is not None
    assert {parent_id(first), parent_id(second)} == {send.context.span_id}
    assert (await app.get_job(job_id) or {}).get("status") == "dead_letter"  # get_job answers for dead letters
    assert [d["id"] for d in await app.dead_letter.list()] == [job_id]


async def test_a_snooze_is_visible_and_not_an_error(tracing: Tracing, app: Soniq) -> None:
    runs: list[int] = []

    @app.job
    async def later() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise Snooze(0)

    await app.enqueue(later)
    worker = RunningWorker(app)
    await wait_until(lambda: len(tracing.spans("process default")) == 2, timeout=10)
    await worker.stop()
    await worker.summary()

    outcomes = sorted(
        (span.start_time or 0, (span.attributes or {})[a.JOB_OUTCOME], span)
        for span in tracing.spans("process default")
    )
    assert [o[1] for o in outcomes] == ["snoozed", "done"]
    snoozed = outcomes[0][2]
    assert snoozed.status.status_code is StatusCode.UNSET
    assert [e.name for e in snoozed.events] == ["soniq.job.snoozed"]
    assert snoozed.attributes is not None
    assert snoozed.attributes[a.JOB_ATTEMPT] == 1


async def test_a_failed_enqueue_ends_its_producer_span_with_the_error(tracing: Tracing, app: Soniq) -> None:
    @app.job
    async def noop() -> None:
        return None

    await app.connect()
    backend: Any = app.backend
    original = backend.enqueue_jobs

    async def broken(params: Any, /) -> None:
        raise ConnectionError("store went away")

    backend.enqueue_jobs = broken
    try:
        with pytest.raises(ConnectionError):
            await app.enqueue(noop)
    finally:
        backend.enqueue_jobs = original
    send = tracing.one("send default")
    assert send.status.status_code is StatusCode.ERROR
    assert send.attributes is not None
    assert send.attributes[a.ERROR_TYPE] == "ConnectionError"
    assert [e.name for e in send.events] == ["exception"]


async def test_without_an_sdk_nothing_is_recorded_and_no_context_is_stored() -> None:
    observer_app = with_observer(Soniq("memory://"), SoniqTracingObserver(tracer_provider=trace.NoOpTracerProvider()))
    done = asyncio.Event()

    @observer_app.job
    async def quiet() -> None:
        # No span was made current for the handler either.
        assert not trace.get_current_span().get_span_context().is_valid
        done.set()

    try:
        job_id = await observer_app.enqueue(quiet)
        row = await observer_app.get_job(job_id)
        assert row is not None
        assert row["trace_context"] is None
        worker = RunningWorker(observer_app)
        await asyncio.wait_for(done.wait(), 10)
        await worker.stop()
        summary = await worker.summary()
        assert summary.processed == 1
    finally:
        await observer_app.close()


async def test_spans_survive_a_batching_processor_because_stopped_flushes(tracing: Tracing) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    # A delay far longer than the test: only a flush gets the spans out.
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=600_000))
    app = with_observer(Soniq("memory://"), create_observer(None, tracer_provider=provider))

    @app.job
    async def tiny() -> None:
        return None

    try:
        job_id = await app.enqueue(tiny)
        worker = RunningWorker(app)
        await wait_until(lambda: _status(app, job_id))
        assert exporter.get_finished_spans() == ()
        await worker.stop()
        await worker.summary()
        names = {s.name for s in exporter.get_finished_spans()}
        assert {"send default", "process default", a.SPAN_WORKER_SHUTDOWN} <= names
    finally:
        await app.close()
        provider.shutdown()
