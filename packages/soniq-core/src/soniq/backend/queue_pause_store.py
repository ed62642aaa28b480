"""The `QueuePauseStore` role: queues paused and resumed fleet-wide, durably.

A paused queue still takes enqueues; no worker claims from it. The pause is stored (it
outlives every worker and restart) and applies to every worker sharing the store, including
one started after the pause. Pausing a queue no worker serves, or that has no rows, is allowed.

Besides its methods, a backend that declares this role promises that `QueueStore.claim_jobs`
honours `ClaimJobsParams.excluded_queues`: rows of those queues are neither claimed nor
touched. Core reads `paused_queues` at most once per `poll_interval` per worker and sends the
paused names there (it never sends them to a backend without the role). Jobs already running
when their queue is paused run to their end.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.params import PauseQueueParams, ResumeQueueParams
from soniq.records import PausedQueue

VERSION = 1
"""The version of `QueuePauseStore` this soniq-core speaks."""


@runtime_checkable
class QueuePauseStore(Protocol):
    """Stored queue pauses (see the module's text)."""

    async def pause_queue(self, params: PauseQueueParams, /) -> bool:
        """Mark `queue` paused with `reason` and ``paused_at = now`` (store clock). True when it
        was not paused before; pausing a paused queue replaces its reason, keeps its
        `paused_at`, and returns False. Atomic: concurrent callers leave exactly one pause."""

    async def resume_queue(self, params: ResumeQueueParams, /) -> bool:
        """Remove the pause of `queue`. True when it was paused, False (nothing written) when not."""

    async def paused_queues(self) -> list[PausedQueue]:
        """Every paused queue, ordered by queue name. One read."""


__all__ = ["VERSION", "PauseQueueParams", "PausedQueue", "QueuePauseStore", "ResumeQueueParams"]
