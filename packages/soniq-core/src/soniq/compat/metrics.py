"""Metrics sinks written for soniq 0.1.0, and sinks with async methods, as listeners on the bus.

0.1.0 called ``record_job_end(status=..., duration_s=..., error=...)`` and awaited what a sink
returned; this release calls the synchronous `soniq.metrics.MetricsSink` with ``outcome`` and
``duration``. `adapt_metrics_sink` wraps a sink that the new calls would not serve.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from soniq.bus import defer
from soniq.metrics import NullMetricsSink

if TYPE_CHECKING:
    from soniq.observers import JobEndEvent, JobStartEvent

logger = logging.getLogger("soniq.metrics")

SINK_CALL_TIMEOUT = 5.0
"""How long one awaited call of an async sink may take before it is abandoned (and logged)."""

_STATUS_OF_OUTCOME = {"done": "done", "retry": "failed", "timeout_retry": "failed", "dead_letter": "dead_letter"}
_LEGACY_KEYWORDS = frozenset({"status", "duration_s", "attempt", "error"})


def _keywords(method: Any) -> tuple[frozenset[str], bool]:
    """The keyword names `method` accepts, and whether it takes ``**kwargs``."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return frozenset(), True
    names = frozenset(p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
    return names, any(p.kind is p.VAR_KEYWORD for p in parameters)


class SinkBridge:
    """A metrics sink with async methods or 0.1.0's keywords, as a bus listener.

    Each job start and end becomes one call with the keywords the sink's method
    declares (``attempt``; ``status`` as 0.1.0 named it, ``duration_s``,
    ``error``; or ours, ``outcome`` and ``duration``). A coroutine it returns
    is awaited in the job's own task through the bus (as 0.1.0 awaited it),
    for at most `SINK_CALL_TIMEOUT`; a failure is logged, never fatal.
    """

    defers_awaitables = True

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self._start = getattr(sink, "record_job_start", None)
        self._end = getattr(sink, "record_job_end", None)
        self._start_keywords = _keywords(self._start) if callable(self._start) else (frozenset(), False)
        self._end_keywords = _keywords(self._end) if callable(self._end) else (frozenset(), False)

    def on_job_start(self, event: JobStartEvent) -> None:
        if not callable(self._start):
            return
        job = event.job
        offered = {"job_id": job.id, "job_name": job.job_name, "queue": job.queue, "attempt": event.attempt}
        self._call("record_job_start", self._start, self._start_keywords, offered)

    def on_job_end(self, event: JobEndEvent) -> None:
        if not callable(self._end):
            return
        job = event.job
        outcome = event.outcome.value
        error = event.error_text if event.error_text is not None else (str(event.error) if event.error else None)
        offered = {
            "job_id": job.id,
            "job_name": job.job_name,
            "queue": job.queue,
            "outcome": outcome,
            "duration": event.duration,
            "status": _STATUS_OF_OUTCOME.get(outcome, outcome),
            "duration_s": event.duration,
            "error": error,
            "attempt": event.attempt,
        }
        self._call("record_job_end", self._end, self._end_keywords, offered)

    def _call(self, name: str, method: Any, accepted: tuple[frozenset[str], bool], offered: dict[str, Any]) -> None:
        names, takes_any = accepted
        kwargs = offered if takes_any and not names else {k: v for k, v in offered.items() if k in names}
        try:
            returned = method(**kwargs)
        except Exception:
            logger.exception("%s.%s raised; ignoring", type(self.sink).__name__, name)
            return
        if inspect.isawaitable(returned):
            defer(self._awaited(name, returned))

    async def _awaited(self, name: str, awaitable: Awaitable[Any]) -> None:
        try:
            await asyncio.wait_for(awaitable, SINK_CALL_TIMEOUT)
        except TimeoutError:
            logger.error(
                "%s.%s did not finish within %gs; abandoned", type(self.sink).__name__, name, SINK_CALL_TIMEOUT
            )
        except Exception:
            logger.exception("%s.%s raised; ignoring", type(self.sink).__name__, name)


def adapt_metrics_sink(sink: object) -> SinkBridge | None:
    """A `SinkBridge` for a sink that our synchronous `MetricsSink` calls would not serve, else None."""
    if sink is None or isinstance(sink, NullMetricsSink):
        return None
    methods = [getattr(sink, name, None) for name in ("record_job_start", "record_job_end")]
    if any(m is not None and inspect.iscoroutinefunction(m) for m in methods):
        return SinkBridge(sink)
    if not all(callable(m) for m in methods):
        return SinkBridge(sink)
    end_names, _ = _keywords(methods[1])
    start_names, _ = _keywords(methods[0])
    if "outcome" not in end_names and (end_names | start_names) & _LEGACY_KEYWORDS:
        return SinkBridge(sink)
    return None
