"""One claimed row as the worker tracks it, from claim to the last write."""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
from dataclasses import dataclass, field
from typing import Any

from soniq.records import JobRecord
from soniq.registry import JobDefinition


class RunPhase(enum.Enum):
    BUFFERED = "buffered"
    """Claimed ahead of a free slot (prefetch); no user code has run."""
    CLAIMED = "claimed"
    """Has a slot; the handler has not been called yet."""
    WAITING_PERMIT = "waiting_permit"
    """A sync job waiting for a thread-pool permit: still async-cancellable."""
    RUNNING_ASYNC = "running_async"
    RUNNING_SYNC = "running_sync"
    """A thread runs the handler; it cannot be cancelled."""
    SETTLING = "settling"
    """The outcome is being written; never interrupted."""
    FINISHED = "finished"


CANCELLABLE_PHASES = frozenset({RunPhase.CLAIMED, RunPhase.WAITING_PERMIT, RunPhase.RUNNING_ASYNC})


@dataclass(eq=False)
class JobRun:
    job: JobRecord
    definition: JobDefinition | None
    phase: RunPhase = RunPhase.CLAIMED
    task: asyncio.Task[None] | None = None
    thread_future: concurrent.futures.Future[Any] | None = None
    abandoned: bool = False
    """Set by the force path: the worker gives the row back with nack_job."""
    pinned: bool = False
    """Set by the force path on a running sync job: from now on only the thread's return decides the row."""
    started_at: float = 0.0
    unwound: asyncio.Event | None = None
    """Set by the force path before it cancels the handler; the run sets it once the handler has unwound."""
    nack_outcome: asyncio.Future[str] | None = None
    """Set by the force path; resolves to how the nack went, so the run's own task reports its end."""
    holds_slot: bool = False
    announced: bool = False
    """Observers were told this run started (so they must hear how it ended)."""

    @property
    def kind(self) -> str:
        if self.definition is None:
            return "unknown"
        return self.definition.handler_kind


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a handler call came to."""

    ok: bool
    result: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    snooze_seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
