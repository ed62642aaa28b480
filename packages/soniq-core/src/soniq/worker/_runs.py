"""One claimed row as the worker tracks it, from claim to the last write (internal).

The force path and the run's own task meet only through `JobRun`'s methods:
`abandon` (cancel the handler, promise a nack), `unwound` (the run's task
says its handler has unwound), `report_nack` (how the nack went) and
`nack_result` (which the run's task awaits to report its own end).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from dataclasses import dataclass, field
from typing import Any

from soniq.encryption import Cipher
from soniq.outcomes import HandlerKind, JobOutcome
from soniq.records import JobRecord
from soniq.registry import JobDefinition
from soniq.worker.state import RunPhase

CANCELLABLE_PHASES = frozenset({RunPhase.CLAIMED, RunPhase.WAITING_PERMIT, RunPhase.RUNNING_ASYNC})


@dataclass(eq=False)
class JobRun:
    job: JobRecord
    definition: JobDefinition | None
    phase: RunPhase = RunPhase.CLAIMED
    task: asyncio.Task[None] | None = None
    thread_future: concurrent.futures.Future[Any] | None = None
    abandoned: bool = False
    """The force path gives the row back with a nack; the run writes nothing itself."""
    pinned: bool = False
    """A running sync job at the force path: from now on only the thread's return decides the row."""
    started_at: float = 0.0
    handler_started: bool = False
    """The handler was called (the async coroutine created, or the thread submitted): a nack at
    shutdown then counts toward the row's `shutdown_nacks`."""
    holds_slot: bool = False
    cipher: Cipher | None = None
    """Set for a job whose values are sealed (`soniq.encryption`): its arguments were opened with it,
    and its result and progress message are sealed with it."""
    timeout: float | None = None
    """The job's deadline in seconds (its own `timeout`, else `job_timeout`); None: none."""
    overran: bool = False
    """The handler ran past its deadline and was cancelled: this run ends as a failed attempt, never a nack."""
    grace_cut: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by shutdown to end an overran handler's cancel grace at once."""
    nack_reason: str = "shutdown_timeout"
    # -- cancel by request (see soniq.worker.cancel_watch) --
    handler_task: asyncio.Task[Any] | None = None
    """The async handler's own task, which a cancel request cancels (never the run's task)."""
    cancel_reached: bool = False
    """A cancel request reached this run before its handler's outcome was known: the row ends
    `cancelled` however the handler then ends, and a handler not yet started never starts."""
    cancel_noted: bool = False
    """The watcher has dealt with this run's request (reached it, or found it too late)."""
    _cancel_signal: threading.Event | None = None
    _unwound: asyncio.Event | None = None
    _nack_outcome: asyncio.Future[JobOutcome] | None = None

    @property
    def kind(self) -> HandlerKind:
        if self.definition is None:
            return HandlerKind.UNKNOWN
        return self.definition.handler_kind

    def cancel_signal(self) -> threading.Event:
        """The event a `JobContext` reads as `cancel_requested` (made on first use: plain runs never need it)."""
        if self._cancel_signal is None:
            self._cancel_signal = threading.Event()
            if self.cancel_reached:
                self._cancel_signal.set()
        return self._cancel_signal

    def reach_with_cancel(self) -> None:
        """Tell the handler a cancel was requested (`ctx.cancel_requested` is true); the run ends `cancelled`."""
        self.cancel_reached = True
        if self._cancel_signal is not None:
            self._cancel_signal.set()

    def pin(self) -> None:
        self.pinned = True

    def abandon(self, reason: str = "shutdown_timeout") -> asyncio.Event | None:
        """Give the run up: a nack will follow. Cancels a handler already under way and returns
        the event its task sets once the handler has unwound (None when no handler was running)."""
        self.abandoned = True
        self.nack_reason = reason
        self._nack_outcome = asyncio.get_running_loop().create_future()
        if self.phase is RunPhase.CLAIMED or self.task is None or self.task.done():
            return None
        self._unwound = asyncio.Event()
        # Only the handler part of the run's task is interrupted; it then waits for the nack.
        self.task.cancel()
        return self._unwound

    def unwound(self) -> None:
        if self._unwound is not None:
            self._unwound.set()

    def report_nack(self, written: bool, outcome: JobOutcome = JobOutcome.NACKED) -> None:
        """How the force path's hand-back went: `outcome` (a nack, or a dead letter at the nack
        limit) when `written`, else unwritten."""
        if self._nack_outcome is not None and not self._nack_outcome.done():
            self._nack_outcome.set_result(outcome if written else JobOutcome.UNWRITTEN)

    async def nack_result(self) -> JobOutcome | None:
        """How the force path's nack of this run went, once it has (None: the run was never abandoned)."""
        if self._nack_outcome is None:
            return None
        return await asyncio.shield(self._nack_outcome)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a handler call came to."""

    ok: bool
    result: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    snooze_seconds: float | None = None
    stuck: bool = False
    """The handler would not stop when cancelled (or its permit never came): dead letters say `stuck`."""
    cancelled: bool = False
    """A cancel request stopped the run before its handler started."""
    hand_back: str | None = None
    """The run never started and the row goes back untouched (a nack), with this warning."""
    hand_back_reason: str | None = None
