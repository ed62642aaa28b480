"""The jobs module the process tests hand to ``soniq worker --jobs-modules``.

It builds the app from environment variables (URL, namespace), installs an
SDK tracer provider whose exporter appends every finished span as a JSON line
to ``$SONIQ_OTEL_TEST_SPANS``, through a batching processor, so the spans
reach the file only because the observer flushes at STOPPED. The provider is
set after the app exists: the observer must find it through the API's proxy.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from soniq import Soniq

_namespace = os.environ.get("SONIQ_OTEL_TEST_NAMESPACE")
app = Soniq(
    os.environ["SONIQ_OTEL_TEST_URL"],
    backend_options={"namespace": _namespace} if _namespace else None,
)


def span_to_dict(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "start": span.start_time,
        "end": span.end_time,
        "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in (span.attributes or {}).items()},
        "events": [
            {
                "name": e.name,
                "timestamp": e.timestamp,
                "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in (e.attributes or {}).items()},
            }
            for e in span.events
        ],
        "links": [f"{link.context.span_id:016x}" for link in span.links],
        "status": span.status.status_code.name,
    }


class JsonLinesExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_to_dict(span)) + "\n" for span in spans)
        with self._lock, open(self._path, "a", encoding="utf-8") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS


# No exit hook: the spans reach the file only if the observer flushes at STOPPED.
_provider = TracerProvider(shutdown_on_exit=False)
# A schedule far beyond any test: spans reach the file only through a flush.
_provider.add_span_processor(
    BatchSpanProcessor(JsonLinesExporter(os.environ["SONIQ_OTEL_TEST_SPANS"]), schedule_delay_millis=600_000)
)
trace.set_tracer_provider(_provider)


def _touch(marker: str) -> None:
    Path(marker).touch()


def _exists(path: str) -> bool:
    return Path(path).exists()


@app.job
async def gated_async(marker: str, release: str) -> str:
    _touch(marker)
    while not _exists(release):  # noqa: ASYNC110 - the release comes from another process
        await asyncio.sleep(0.01)
    return "released"


@app.job
async def endless_async(marker: str) -> None:
    _touch(marker)
    await asyncio.sleep(3600)


@app.job
def blocking_sync(marker: str, release: str) -> str:
    Path(marker).touch()
    deadline = time.monotonic() + 60
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return "released"
