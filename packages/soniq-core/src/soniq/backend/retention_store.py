"""The `RetentionStore` role: deleting finished rows past their retention."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.params import (
    PruneDeadLettersParams,
    PruneJobsParams,
)

VERSION = 1
"""The version of `RetentionStore` this soniq-core speaks."""


@runtime_checkable
class RetentionStore(Protocol):
    """Deleting finished rows past their retention."""

    async def prune_jobs(self, params: PruneJobsParams, /) -> int:
        """Delete at most `limit` `done` or `cancelled` rows whose ``expires_at <= now``;
        never a `queued` or `processing` row, whatever its `expires_at`. One short
        statement (or transaction) per call that skips rows locked by others, so it
        never blocks a claim. Returns how many rows it deleted; call again while it
        returns `limit`."""

    async def prune_dead_letters(self, params: PruneDeadLettersParams, /) -> int:
        """Delete at most `limit` dead-letter rows with ``moved_to_dead_letter_at < before``.
        Returns how many it deleted."""


__all__ = [
    "VERSION",
    "PruneDeadLettersParams",
    "PruneJobsParams",
    "RetentionStore",
]
