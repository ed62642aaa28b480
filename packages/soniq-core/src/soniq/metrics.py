"""The metrics sink: counters and events the worker reports as it works."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    pass

logger = logging.getLogger("soniq.metrics")


@runtime_checkable
class MetricsSink(Protocol):
    """Receives job starts and ends and named events such as ``shutdown_nack``.

    Calls are made on the worker's event loop and must not block.
    """

    def record_job_start(self, *, job_id: str, job_name: str, queue: str) -> None: ...

    def record_job_end(self, *, job_id: str, job_name: str, queue: str, outcome: str, duration: float) -> None: ...

    def emit(self, event: str, fields: Mapping[str, Any]) -> None: ...


class NullMetricsSink:
    """The default: records nothing."""

    def record_job_start(self, *, job_id: str, job_name: str, queue: str) -> None:
        return None

    def record_job_end(self, *, job_id: str, job_name: str, queue: str, outcome: str, duration: float) -> None:
        return None

    def emit(self, event: str, fields: Mapping[str, Any]) -> None:
        return None


@dataclass
class InMemoryMetricsSink:
    """Keeps everything it receives, for tests and for `soniq status`-style tools."""

    starts: list[dict[str, Any]] = field(default_factory=list)
    ends: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record_job_start(self, *, job_id: str, job_name: str, queue: str) -> None:
        with self._lock:
            self.starts.append({"job_id": job_id, "job_name": job_name, "queue": queue})

    def record_job_end(self, *, job_id: str, job_name: str, queue: str, outcome: str, duration: float) -> None:
        with self._lock:
            self.ends.append(
                {"job_id": job_id, "job_name": job_name, "queue": queue, "outcome": outcome, "duration": duration}
            )

    def emit(self, event: str, fields: Mapping[str, Any]) -> None:
        with self._lock:
            self.events.append((event, dict(fields)))

    def events_named(self, event: str) -> list[dict[str, Any]]:
        with self._lock:
            return [f for name, f in self.events if name == event]


def safe_call(target: object, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call a sink or observer hook; a failing hook is logged, never fatal to the worker."""
    try:
        return getattr(target, method)(*args, **kwargs)
    except Exception:
        logger.exception("%s.%s raised; ignoring", type(target).__name__, method)
        return None
