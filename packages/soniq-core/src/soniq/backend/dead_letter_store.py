"""The `DeadLetterStore` role: reading, replaying and deleting dead-letter rows."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.params import (
    DeadLetterPageParams,
    DeadLetterStatsParams,
    DeleteDeadLettersParams,
    GetDeadLetterParams,
    PurgeDeadLetterParams,
    ReplayDeadLetterParams,
)
from soniq.records import (
    DeadLetterPage,
    DeadLetterRecord,
    DeadLetterStats,
)

VERSION = 1
"""The version of `DeadLetterStore` this soniq-core speaks."""


@runtime_checkable
class DeadLetterStore(Protocol):
    """Reading, replaying and deleting dead-letter rows."""

    async def dead_letter_page(self, params: DeadLetterPageParams, /) -> DeadLetterPage:
        """As `job_page`, over dead-letter rows, newest ``(moved_to_dead_letter_at, id)``
        first, filtered by `dead_letter_reason`, queue and name, and by `filter` when
        given (every field of it must match as well). Keyset pagination: following
        `next_cursor` never repeats or skips a row that existed when the first page was
        read, whatever is inserted or deleted meanwhile. The one dead-letter listing:
        core serves ``app.dead_letter.list(offset=...)`` by walking these pages."""

    async def get_dead_letter(self, params: GetDeadLetterParams, /) -> DeadLetterRecord | None:
        """One dead-letter row by its original job id."""

    async def replay_dead_letter(self, params: ReplayDeadLetterParams, /) -> str | None:
        """In one transaction insert a fresh `queued` row with id `new_job_id`
        (same name and args; queue, priority and `max_attempts` from the params where
        given, else the dead-letter row's; ``attempts = params.attempts``, 0 by default)
        and on the dead-letter row ``resurrection_count += 1`` and
        ``last_resurrection_at = now``. The dead-letter row stays for the
        record. Returns the new id, or None when there is no such row."""

    async def purge_dead_letter(self, params: PurgeDeadLetterParams, /) -> bool:
        """Delete the dead-letter row. False when there was none."""

    async def delete_dead_letters(self, params: DeleteDeadLettersParams, /) -> set[str]:
        """Delete at most `limit` dead-letter rows matching `filter`, oldest
        `moved_to_dead_letter_at` first, in one short statement or script; returns
        their ids. Core repeats the call until it returns fewer than `limit`."""

    async def dead_letter_stats(self, params: DeadLetterStatsParams, /) -> DeadLetterStats:
        """Counts over the dead-letter rows matching `filter` (None: all), in one read."""


__all__ = [
    "VERSION",
    "DeadLetterPage",
    "DeadLetterPageParams",
    "DeadLetterRecord",
    "DeadLetterStats",
    "DeadLetterStatsParams",
    "DeadLetterStore",
    "DeleteDeadLettersParams",
    "GetDeadLetterParams",
    "PurgeDeadLetterParams",
    "ReplayDeadLetterParams",
]
