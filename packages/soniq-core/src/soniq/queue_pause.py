"""Pausing and resuming queues fleet-wide: `QueuePausing` is a mixin of `Soniq`.

A pause is stored by the backend (role `QueuePauseStore`), so it applies to every worker sharing
the store, outlives restarts, and reaches a worker started after it. A paused queue still takes
enqueues; workers stop claiming from it from their next wake-up on (at most `poll_interval`
later) and let the jobs already running finish.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from soniq.backend import QueuePauseStore, require_role
from soniq.errors import JobOptionsError
from soniq.params import PauseQueueParams, ResumeQueueParams
from soniq.validation import check_queue_name

if TYPE_CHECKING:
    from soniq.backend import QueueStore

__all__ = ["MAX_PAUSE_REASON_LENGTH", "QUEUE_PAUSE", "QueuePausing", "check_pause_reason", "pause_store"]

QUEUE_PAUSE = "queue pause"
"""The feature name `MissingBackendRoleError` uses for pausing, resuming and listing pauses."""

MAX_PAUSE_REASON_LENGTH = 500
"""The longest `reason` a pause takes, in characters."""


def pause_store(backend: object) -> QueuePauseStore:
    """`backend` as a `QueuePauseStore`, or `MissingBackendRoleError` naming the feature."""
    protocol: Any = QueuePauseStore  # a protocol class in the call trips mypy's type-abstract check
    store: QueuePauseStore = require_role(backend, protocol, QUEUE_PAUSE)
    return store


def check_pause_reason(reason: object) -> str | None:
    """`reason` if a store can keep it (None or a string of at most `MAX_PAUSE_REASON_LENGTH`
    characters without NUL or a lone surrogate), else `JobOptionsError` naming the option."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise JobOptionsError(f"reason must be None or a string, got {type(reason).__name__}")
    if len(reason) > MAX_PAUSE_REASON_LENGTH:
        raise JobOptionsError(
            f"reason is {len(reason)} characters, over the limit of {MAX_PAUSE_REASON_LENGTH} characters"
        )
    for char in reason:
        if char == "\x00":
            raise JobOptionsError("reason contains a NUL character (U+0000), which stores cannot keep")
        if "\ud800" <= char <= "\udfff":
            raise JobOptionsError(f"reason contains a lone surrogate (U+{ord(char):04X}), which stores cannot keep")
    return reason


class QueuePausing:
    """Pausing and resuming queues; a mixin of `Soniq`."""

    if TYPE_CHECKING:

        async def connected_backend(self) -> QueueStore: ...

    async def pause_queue(self, name: str, *, reason: str | None = None) -> bool:
        """Pause the queue `name` for every worker sharing the store: True when it was not paused
        before; pausing a paused queue replaces its reason, keeps its `paused_at`, and returns False.

        The queue still takes enqueues; no worker claims from it from its next wake-up on (at most
        `poll_interval` later). Jobs already running finish. Needs the backend role `QueuePauseStore`."""
        queue = check_queue_name(name)
        text = check_pause_reason(reason)
        store = pause_store(await self.connected_backend())
        return await store.pause_queue(PauseQueueParams(queue=queue, reason=text))

    async def resume_queue(self, name: str) -> bool:
        """Resume the queue `name`: True when it was paused, False (nothing written) when not."""
        queue = check_queue_name(name)
        store = pause_store(await self.connected_backend())
        return await store.resume_queue(ResumeQueueParams(queue=queue))

    async def paused_queues(self) -> list[dict[str, Any]]:
        """Every paused queue as ``{"queue", "reason", "paused_at"}``, ordered by queue name."""
        store = pause_store(await self.connected_backend())
        return [paused.to_dict() for paused in await store.paused_queues()]
