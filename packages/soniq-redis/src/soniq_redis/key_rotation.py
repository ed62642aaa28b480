"""`KeyRotationStore` on Redis: walking the row indexes for sealed values, and re-sealing a row.

The walk reads the indexes the scripts already keep, ``all`` (every job row, scored by its
`created_at`, which never changes) and then ``dl`` (every dead-letter row, scored by its move
time), with `sealed_rows.lua`: each page looks at up to `SealedRowsParams.limit` members (never
more than `PAGE_MEMBERS`, so one script holds the server briefly), reads their ``args``,
``result`` and ``progress`` and keeps the rows whose text holds a mark of a sealed value. The
cursor names the table and the last member looked at (``jobs:<score>:<id>``,
``dead_letter:<score>:<id>``, or ``dead_letter`` for the start of the dead letters); members sort
by (score, id), so a page resumes just past that member even when it has left the index since.
`reseal_row.lua` is the compare-and-set, one script on the row's hash. Both run in the
namespace's slot, like every script, so a Redis Cluster serves them as it does the rest.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

from soniq.backend import ResealRowParams, SealedRow, SealedRowPage, SealedRowsParams
from soniq.backend.key_rotation_store import SEALED_MARKS

PAGE_MEMBERS = 1_000
"""The most index members one page looks at, whatever its `limit`."""
TABLES = ("jobs", "dead_letter")
_FIELDS = (("args_json", "args"), ("result_json", "result"), ("progress_json", "progress"))

Run = Callable[..., Awaitable[Any]]
"""`RedisBackend._run`: a script's name and its arguments after the prefix."""


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def parse_cursor(cursor: str | None) -> tuple[str, str, str]:
    """The table, the last score and the last id a cursor names ('' and '': its first row)."""
    if cursor is None:
        return TABLES[0], "", ""
    table, _, rest = cursor.partition(":")
    if table in TABLES and not rest:
        return table, "", ""
    score, sep, last_id = rest.partition(":")
    if table not in TABLES or not sep or not last_id or not _is_number(score):
        raise ValueError(f"not a cursor of the Redis backend's sealed_rows: {cursor!r}")
    return table, score, last_id


async def sealed_rows(run: Run, params: SealedRowsParams) -> SealedRowPage:
    if params.limit < 1:
        raise ValueError(f"limit must be 1 or more, got {params.limit}")
    table, score, last_id = parse_cursor(params.cursor)
    budget = min(params.limit, PAGE_MEMBERS)
    rows: list[SealedRow] = []
    while True:
        found, looked_at, score, last_id = await run("sealed_rows", table, score, last_id, budget, *SEALED_MARKS)
        score, last_id = str(score), str(last_id)
        for row_id, args, result, progress in found:
            rows.append(SealedRow(table, str(row_id), _text(args), _text(result), _text(progress)))
        budget -= int(looked_at)
        if budget > 0 and table == TABLES[-1]:
            return SealedRowPage(rows=rows, next_cursor=None)
        if budget > 0:
            # The job rows are done: the dead letters follow, in this page while it has room.
            table, score, last_id = TABLES[1], "", ""
            continue
        next_cursor = f"{table}:{score}:{last_id}" if last_id else table
        return SealedRowPage(rows=rows, next_cursor=next_cursor)


async def reseal_row(run: Run, params: ResealRowParams) -> bool:
    if params.table not in TABLES:
        raise ValueError(f"table must be one of {', '.join(TABLES)}, got {params.table!r}")
    args: list[str] = []
    for attribute, field in _FIELDS:
        change = getattr(params, attribute)
        if change is not None:
            old, new = change
            args += [field, old, new]
    return bool(await run("reseal_row", params.table, params.id, *args))


__all__ = ["PAGE_MEMBERS", "TABLES", "parse_cursor", "reseal_row", "sealed_rows"]
