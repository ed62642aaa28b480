"""Helpers shared by the soniq-otel tests (the folder is put on sys.path by conftest)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from soniq import Soniq
from soniq_otel import SoniqTracingObserver

FAST_SETTINGS: dict[str, Any] = {
    "heartbeat_interval": 0.5,
    "heartbeat_timeout": 5.0,
    "poll_interval": 0.1,
    "retry_backoff_base": 0.01,
    "retry_backoff_max": 0.02,
    "shutdown_timeout": 1.0,
    "sync_handler_grace_seconds": 1.0,
}


async def wait_until(condition: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.01) -> Any:
    """Poll `condition` (sync or async) until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


class Tracing:
    """An SDK provider with an in-memory exporter, and the observer built over it."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.observer = SoniqTracingObserver(tracer_provider=self.provider)

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        found = list(self.exporter.get_finished_spans())
        return [s for s in found if name is None or s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.spans(name)
        assert len(found) == 1, f"expected one {name!r} span, got {[s.name for s in self.spans()]}"
        return found[0]


def make_app(tracing: Tracing, **settings: Any) -> Soniq:
    return with_observer(Soniq("memory://", **{**FAST_SETTINGS, **settings}), tracing.observer)


def with_observer(app: Soniq, observer: Any) -> Soniq:
    app.add_observer(observer)
    return app


class RunningWorker:
    """A worker from `app.worker` running in a task, with the test driving its stop."""

    def __init__(self, app: Soniq, **kwargs: Any) -> None:
        self.app = app
        self.worker = app.worker(install_signal_handlers=False, **kwargs)
        self.task: asyncio.Task[Any] = asyncio.create_task(self.worker.run())

    async def stop(self, *, times: int = 1) -> None:
        for _ in range(times):
            self.worker.stop("SIGTERM")

    async def summary(self, timeout: float = 15.0) -> Any:
        return await asyncio.wait_for(self.task, timeout)
