"""The `KeyRotationStore` role: finding stored rows that hold sealed values, and re-sealing them.

Core seals an encrypted job's arguments and result as an envelope, ``{"__soniq_encrypted__":
TOKEN}``, and its progress message as text starting ``soniq-encrypted:`` (see `soniq.encryption`);
stores keep both as any other JSON. ``soniq keys rotate`` walks the rows this role finds, re-seals
each value with the newest key in core, and writes it back through `reseal_row`, in bounded pages.

- `sealed_rows` returns a page of `soniq_jobs` rows (``table="jobs"``) and dead-letter rows
  (``table="dead_letter"``) with each one's stored `args`, `result` and `progress` as JSON text
  (None where the row has none). It must return every row whose args, result or progress JSON
  contains the text ``__soniq_encrypted__`` or ``soniq-encrypted:`` exactly once over a walk from
  cursor None to the last page (None `next_cursor`), rows added or changed during the walk aside;
  it may also return rows holding neither (core skips them). A page holds at most
  `SealedRowsParams.limit` rows and may hold fewer, even none, before the last page; the cursor is
  the backend's own text. Cost grows with the rows a page looks at, never with the whole table.
- `reseal_row` writes each given field's new JSON text only if the field's stored value is still
  the old one (compared as JSON values or as the text returned), all given fields or none, in one
  atomic step. True when it wrote; False (nothing written) when the row is gone or any field has
  changed since it was read (a worker settled it meanwhile: its own write wins).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.params import ResealRowParams, SealedRowsParams
from soniq.records import SealedRow, SealedRowPage

VERSION = 1
"""The version of `KeyRotationStore` this soniq-core speaks."""

SEALED_MARKS = ("__soniq_encrypted__", "soniq-encrypted:")
"""The texts whose presence in a stored value's JSON means it may hold a sealed value."""


SEALED_TABLES = ("jobs", "dead_letter")
"""The tables a walk goes through, in order (`SealedRow.table`)."""


def holds_sealed(*texts: str | None) -> bool:
    """Whether any of the stored JSON texts contains one of `SEALED_MARKS`."""
    return any(text is not None and mark in text for text in texts for mark in SEALED_MARKS)


def sealed_cursor(table: str, last_id: str | None) -> str:
    """A keyset cursor for a walk that orders each table by id: ``jobs:<id>``, ``dead_letter``
    (the start of the dead-letter table) or ``dead_letter:<id>``."""
    return table if last_id is None else f"{table}:{last_id}"


def parse_sealed_cursor(cursor: str | None) -> tuple[str, str | None]:
    """``(table, last id looked at or None)`` from a `sealed_cursor` (None: the start of the walk);
    `ValueError` for any other text."""
    if cursor is None:
        return SEALED_TABLES[0], None
    table, sep, after = cursor.partition(":")
    if table in SEALED_TABLES and (after or not sep):
        return table, after or None
    raise ValueError(f"not a cursor of this backend's sealed_rows: {cursor!r}")


@runtime_checkable
class KeyRotationStore(Protocol):
    """Finding and re-sealing stored sealed values (see the module's text)."""

    async def sealed_rows(self, params: SealedRowsParams, /) -> SealedRowPage:
        """A page of rows that may hold sealed values (see the module's text)."""

    async def reseal_row(self, params: ResealRowParams, /) -> bool:
        """Compare-and-set the given fields of one row (see the module's text)."""


__all__ = [
    "SEALED_MARKS",
    "SEALED_TABLES",
    "VERSION",
    "KeyRotationStore",
    "ResealRowParams",
    "SealedRow",
    "SealedRowPage",
    "SealedRowsParams",
    "holds_sealed",
    "parse_sealed_cursor",
    "sealed_cursor",
]
