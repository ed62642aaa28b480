"""The closed vocabularies of job events: how a run ended and what kind of handler ran it.

Both enums are `str`-valued with the exact strings earlier releases sent, so
a metrics sink or observer that compares against ``"done"`` keeps working.
"""

from __future__ import annotations

import enum


class HandlerKind(str, enum.Enum):
    ASYNC = "async"
    """An ``async def`` handler, run on the worker's loop (cancellable)."""
    SYNC = "sync"
    """A plain ``def`` handler, run in the bounded sync thread pool (never cancelled)."""
    UNKNOWN = "unknown"
    """No job of that name is registered in this worker; the row is dead-lettered."""


class JobOutcome(str, enum.Enum):
    DONE = "done"
    RETRY = "retry"
    TIMEOUT_RETRY = "timeout_retry"
    """The handler overran its timeout and the job will run again."""
    SNOOZED = "snoozed"
    DEAD_LETTER = "dead_letter"
    NACKED = "nacked"
    """Given back at shutdown with attempts kept; not a failure of the job."""
    LOST = "lost"
    """The row was no longer this worker's (stale recovery took it); nothing was written."""
    UNWRITTEN = "unwritten"
    """The store could not be reached in time; the row stays for stale recovery."""
    CANCELLED = "cancelled"
    """A cancel request stopped the run (or reached it before it started): the row is `cancelled`,
    the attempt not counted."""
    UNFINISHED = "unfinished"
    """Never sent by core: what an observer reports for a run whose end it never heard."""

    @property
    def failed(self) -> bool:
        """The run did not get the job done and the job is not merely put off."""
        return self in _FAILED


_FAILED = frozenset(
    {JobOutcome.RETRY, JobOutcome.TIMEOUT_RETRY, JobOutcome.DEAD_LETTER, JobOutcome.LOST, JobOutcome.UNWRITTEN}
)
