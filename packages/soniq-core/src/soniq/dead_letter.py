"""The dead-letter service: ``app.dead_letter``.

One row at a time: `list`, `get`, `replay` (with overrides), `purge` (alias `delete`).
By filter (`DeadLetterFilter`, 0.1.0's names): `bulk_replay`, `bulk_delete`, `stats`,
`cleanup` (rows older than N days, with a dry run) and `export` (JSON or CSV text).
Bulk writes go to the store in bounded batches, so none of them holds a lock for long.

Every method needs the backend role `DeadLetterStore`: on a backend without it each one raises
`MissingBackendRoleError` ("the dead-letter API") before it reads or checks anything else.
"""

from __future__ import annotations

import builtins
import csv
import io
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from soniq import features
from soniq.encryption import shown
from soniq.errors import DeadLetterNotFoundError as DeadLetterNotFoundError
from soniq.params import (
    DeadLetterFilter as StoreFilter,
)
from soniq.params import (
    DeadLetterPageParams,
    DeadLetterStatsParams,
    DeleteDeadLettersParams,
    GetDeadLetterParams,
    JobCursor,
    PurgeDeadLetterParams,
    ReplayDeadLetterParams,
)
from soniq.validation import (
    MAX_FILTER_LIMIT,
    MAX_OFFSET,
    MAX_PAGE_LIMIT,
    JobOptionsError,
    check_count,
    check_filter_text,
    check_page,
    check_priority,
    check_queue_filter,
    check_queue_name,
    lookup_id,
)

if TYPE_CHECKING:
    from soniq.app_context import AppContext
    from soniq.backend import DeadLetterStore

BULK_BATCH = 500
"""Rows per store call in bulk delete (and per page read in bulk replay and export)."""
EXPORT_FORMATS = ("json", "csv")
EXPORT_COLUMNS = (
    "id",
    "job_name",
    "queue",
    "args",
    "attempts",
    "max_attempts",
    "priority",
    "last_error",
    "dead_letter_reason",
    "moved_to_dead_letter_at",
    "resurrection_count",
    "last_resurrection_at",
)


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """Which dead-letter rows a bulk operation touches; every given field must match.

    The names are soniq 0.1.0's. `date_from` and `date_to` bound `moved_to_dead_letter_at`
    (both inclusive; a naive datetime is taken as UTC). `limit` caps how many rows the
    operation reads or writes (1 to `MAX_FILTER_LIMIT`), `offset` skips the newest ones first
    (listing order). A queue enqueue would refuse, or a job name or reason holding a NUL or a
    lone surrogate, is `JobOptionsError` naming the field.
    """

    job_names: Sequence[str] | None = None
    queues: Sequence[str] | None = None
    reasons: Sequence[str] | None = None
    date_from: datetime | None = None
    date_to: datetime | None = None
    has_been_resurrected: bool | None = None
    limit: int = 1000
    offset: int = 0

    def __post_init__(self) -> None:
        for name in ("job_names", "queues", "reasons"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, str) or not all(isinstance(item, str) for item in value):
                raise JobOptionsError(f"DeadLetterFilter.{name} must be a list of strings, got {value!r}")
            for item in value:
                if name == "queues":
                    check_queue_name(item, what=f"DeadLetterFilter.{name}")
                else:
                    check_filter_text(item, what=f"DeadLetterFilter.{name}")
            object.__setattr__(self, name, tuple(value))
        for name in ("date_from", "date_to"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, datetime):
                raise JobOptionsError(f"DeadLetterFilter.{name} must be a datetime, got {value!r}")
            if isinstance(value, datetime) and value.tzinfo is None:
                object.__setattr__(self, name, value.replace(tzinfo=UTC))
        if self.has_been_resurrected is not None and not isinstance(self.has_been_resurrected, bool):
            raise JobOptionsError(
                f"DeadLetterFilter.has_been_resurrected must be True, False or None, got {self.has_been_resurrected!r}"
            )
        if self.date_from and self.date_to and self.date_from > self.date_to:
            raise JobOptionsError("DeadLetterFilter.date_from must not be after date_to")
        check_count(self.limit, what="DeadLetterFilter.limit", low=1, high=MAX_FILTER_LIMIT)
        check_count(self.offset, what="DeadLetterFilter.offset", low=0, high=MAX_OFFSET)

    def for_store(self) -> StoreFilter:
        return StoreFilter(
            job_names=self.job_names,
            queues=self.queues,
            reasons=self.reasons,
            moved_from=self.date_from,
            moved_to=self.date_to,
            resurrected=self.has_been_resurrected,
        )


class DeadLetterService:
    def __init__(self, context: AppContext) -> None:
        self._context = context

    def _require(self) -> None:
        """`MissingBackendRoleError` unless the app's backend fills `DeadLetterStore`."""
        features.dead_letter_store(self._context.backend)

    async def _store(self) -> DeadLetterStore:
        """The connected backend (the sync bridge's on its thread) as a `DeadLetterStore`."""
        return features.dead_letter_store(await self._context.connected_backend())

    async def list(
        self,
        queue: str | None = None,
        *,
        limit: int = 100,
        offset: int = 0,
        filter: DeadLetterFilter | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """Rows most recently moved first (ties: the larger id first); with `filter`, only matching
        rows (its own limit and offset then apply).

        `limit` is 1 to `soniq.validation.MAX_PAGE_LIMIT` (10,000); a `queue` enqueue would refuse is
        `JobOptionsError`. The store pages by keyset (`DeadLetterStore.dead_letter_page`), so `offset`
        is served by reading the first ``offset + limit`` rows and dropping `offset` of them (in reads
        of 10,000 while more than that are left to skip): a deep offset costs in proportion to it. To
        page deep, follow `dead_letter_page`'s `next_cursor` instead."""
        self._require()
        check_queue_filter(queue)
        if filter is None:
            check_page(limit, offset)
        else:
            limit, offset = filter.limit, filter.offset  # checked by the filter itself
        backend = await self._store()
        wanted = DeadLetterPageParams(
            queues=None if queue is None else [queue], filter=filter.for_store() if filter is not None else None
        )
        before: JobCursor | None = None
        while offset >= MAX_PAGE_LIMIT:  # whole reads of rows to skip
            skipped = await backend.dead_letter_page(replace(wanted, before=before, limit=MAX_PAGE_LIMIT))
            if skipped.next_cursor is None or not skipped.rows:
                return []  # no row left beyond the ones skipped
            offset -= len(skipped.rows)
            before = skipped.next_cursor
        page = await backend.dead_letter_page(replace(wanted, before=before, limit=offset + limit))
        return [_shown(row.to_dict()) for row in page.rows[offset:]]

    async def get(self, job_id: str) -> dict[str, Any] | None:
        """The dead-letter row, or None (also for an id no store can hold: see `soniq.validation.lookup_id`)."""
        self._require()
        key = lookup_id(job_id)
        if key is None:
            return None
        backend = await self._store()
        row = await backend.get_dead_letter(GetDeadLetterParams(job_id=key))
        return _shown(row.to_dict()) if row else None

    async def replay(
        self,
        job_id: str,
        *,
        reset_attempts: bool = True,
        new_max_attempts: int | None = None,
        new_priority: int | None = None,
        new_queue: str | None = None,
    ) -> str:
        """Queue a fresh copy of a dead-lettered job; returns the new job's id.

        The dead-letter row stays, with `resurrection_count` incremented. The copy starts at
        ``attempts = 0`` unless ``reset_attempts=False`` (then it keeps the dead row's count);
        `new_max_attempts`, `new_priority` and `new_queue` replace the dead row's values.
        """
        self._require()
        _check_overrides(reset_attempts, new_max_attempts, new_priority, new_queue)
        key = lookup_id(job_id)
        if key is None:
            raise DeadLetterNotFoundError(f"no dead-letter job with id {job_id!r}")
        backend = await self._store()
        attempts = 0
        if not reset_attempts:
            dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=key))
            if dead is None:
                raise DeadLetterNotFoundError(f"no dead-letter job with id {job_id!r}")
            attempts = dead.attempts
        new_id = await backend.replay_dead_letter(
            ReplayDeadLetterParams(
                job_id=key,
                new_job_id=str(uuid.uuid4()),
                scheduled_at=datetime.now(UTC),
                queue=new_queue,
                priority=new_priority,
                max_attempts=new_max_attempts,
                attempts=attempts,
            )
        )
        if new_id is None:
            raise DeadLetterNotFoundError(f"no dead-letter job with id {job_id!r}")
        return new_id

    async def bulk_replay(
        self,
        filter: DeadLetterFilter,
        *,
        reset_attempts: bool = True,
        new_max_attempts: int | None = None,
        new_priority: int | None = None,
        new_queue: str | None = None,
    ) -> builtins.list[str]:
        """Replay every row the filter matches (up to its `limit`); returns the new ids.

        The matching ids are read first, then each is replayed on its own, so a row moved
        to the dead-letter table meanwhile is not picked up twice.
        """
        self._require()
        _check_overrides(reset_attempts, new_max_attempts, new_priority, new_queue)
        ids = [row["id"] for row in await self.list(filter=filter)]
        replayed = []
        for job_id in ids:
            try:
                replayed.append(
                    await self.replay(
                        job_id,
                        reset_attempts=reset_attempts,
                        new_max_attempts=new_max_attempts,
                        new_priority=new_priority,
                        new_queue=new_queue,
                    )
                )
            except DeadLetterNotFoundError:
                continue  # deleted by someone else since it was listed
        return replayed

    async def purge(self, job_id: str) -> bool:
        """Delete a dead-letter row for good; False when there was none."""
        self._require()
        key = lookup_id(job_id)
        if key is None:
            return False
        backend = await self._store()
        return await backend.purge_dead_letter(PurgeDeadLetterParams(job_id=key))

    delete = purge

    async def bulk_delete(self, filter: DeadLetterFilter) -> int:
        """Delete every row the filter matches, oldest first, in batches of `BULK_BATCH`
        (at most `filter.limit` rows); returns how many went. `filter.offset` is not used."""
        backend = await self._store()
        wanted, remaining, deleted = filter.for_store(), filter.limit, 0
        while remaining > 0:
            batch = min(BULK_BATCH, remaining)
            gone = await backend.delete_dead_letters(DeleteDeadLettersParams(filter=wanted, limit=batch))
            deleted += len(gone)
            remaining -= len(gone)
            if len(gone) < batch:
                break
        return deleted

    async def stats(self, filter: DeadLetterFilter | None = None) -> dict[str, Any]:
        """``total``, counts ``by_job_name`` / ``by_queue`` / ``by_reason``, ``resurrected``,
        ``oldest_moved_at`` and ``newest_moved_at`` over the matching rows (all when None)."""
        backend = await self._store()
        params = DeadLetterStatsParams(filter=filter.for_store() if filter is not None else None)
        return (await backend.dead_letter_stats(params)).to_dict()

    async def cleanup(self, days: float = 30, *, dry_run: bool = False) -> int:
        """Delete rows moved to the dead-letter table more than `days` days ago; returns how many
        (with `dry_run`, how many would go, deleting nothing)."""
        self._require()
        if isinstance(days, bool) or not isinstance(days, (int, float)) or days < 0:
            raise JobOptionsError(f"cleanup days must be a number of at least 0, got {days!r}")
        wanted = StoreFilter(moved_to=datetime.now(UTC) - timedelta(days=days))
        backend = await self._store()
        if dry_run:
            return (await backend.dead_letter_stats(DeadLetterStatsParams(filter=wanted))).total
        deleted = 0
        while True:
            gone = await backend.delete_dead_letters(DeleteDeadLettersParams(filter=wanted, limit=BULK_BATCH))
            deleted += len(gone)
            if len(gone) < BULK_BATCH:
                return deleted

    async def export(self, filter: DeadLetterFilter | None = None, *, format: str = "json") -> str:
        """The matching rows (newest first, up to the filter's `limit`) as JSON or CSV text."""
        self._require()
        if format not in EXPORT_FORMATS:
            raise JobOptionsError(f"export format must be one of {', '.join(EXPORT_FORMATS)}, got {format!r}")
        rows = await self.list(filter=filter or DeadLetterFilter())
        return export_text(rows, format)


def export_text(rows: list[dict[str, Any]], format: str) -> str:
    """Dead-letter rows as JSON (a list of objects) or CSV (`EXPORT_COLUMNS`, args as JSON)."""
    if format == "json":
        return json.dumps(rows, indent=2, default=_iso, ensure_ascii=False) + "\n"
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(EXPORT_COLUMNS)
    for row in rows:
        values = []
        for column in EXPORT_COLUMNS:
            value = row.get(column)
            if column == "args":
                value = json.dumps(value, ensure_ascii=False, default=str)
            elif isinstance(value, datetime):
                value = value.isoformat()
            values.append("" if value is None else value)
        writer.writerow(values)
    return out.getvalue()


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _check_overrides(
    reset_attempts: bool, new_max_attempts: int | None, new_priority: int | None, new_queue: str | None
) -> None:
    """Refuse a bad override before anything is written, naming the option."""
    if not isinstance(reset_attempts, bool):
        raise JobOptionsError(f"reset_attempts must be True or False, got {reset_attempts!r}")
    if new_max_attempts is not None and (
        isinstance(new_max_attempts, bool) or not isinstance(new_max_attempts, int) or new_max_attempts < 1
    ):
        raise JobOptionsError(f"new_max_attempts must be an integer of at least 1, got {new_max_attempts!r}")
    if new_priority is not None:
        try:
            check_priority(new_priority)
        except JobOptionsError as exc:
            raise JobOptionsError(f"new_priority: {exc}") from None
    if new_queue is not None:
        check_queue_name(new_queue, what="new_queue")


def _shown(data: dict[str, Any]) -> dict[str, Any]:
    """A dead-letter row with sealed arguments and result read ``"encrypted"`` (`soniq.encryption`)."""
    data["args"] = shown(data.get("args"))
    data["result"] = shown(data.get("result"))
    return data
