"""`KeyRotationStore` on SQLite: keyset pages over sealed values, and their compare-and-set.

A page looks at most `limit` rows: the next ones of `soniq_jobs` in id order (its primary key
index), then, once those are done, the next ones of `soniq_dead_letter_jobs`, and returns those
whose args, result or progress text holds one of `SEALED_MARKS` (``instr`` on the stored text,
in the same statement). So a page costs `limit` index steps whatever the table's size, and may
hold no row at all before the last page. The cursor is ``jobs:<last id looked at>``, then
``dead_letter`` (the start of the dead-letter table) and ``dead_letter:<last id looked at>``.

`reseal_row` is one ``UPDATE ... WHERE id = ? AND col IS ?`` per call: each given column is
written only if its stored text is still the text the walk returned, all of them or none.
Dead-letter rows keep their args only, so a result or progress given for one never matches.
"""

from __future__ import annotations

from typing import Any

from soniq.backend import (
    ResealRowParams,
    SealedRow,
    SealedRowPage,
    SealedRowsParams,
    parse_sealed_cursor,
    sealed_cursor,
)
from soniq.backend.key_rotation_store import SEALED_MARKS
from soniq_sqlite.connection import Database

JOBS = "jobs"
DEAD_LETTER = "dead_letter"
_TABLES = {JOBS: "soniq_jobs", DEAD_LETTER: "soniq_dead_letter_jobs"}
_JOB_FIELDS = ("args", "result", "progress")
_FIELDS = {JOBS: _JOB_FIELDS, DEAD_LETTER: ("args",)}
"""The JSON text columns each table keeps (a dead-letter row keeps no result or progress)."""


def _holds_mark(column: str) -> str:
    """SQL true when `column`'s text holds a mark (one ``?`` per mark); false for NULL."""
    return "ifnull(" + " OR ".join(f"instr({column}, ?) > 0" for _ in SEALED_MARKS) + ", 0)"


def _window_sql(table: str, *, after: bool) -> str:
    """The next rows of `table` (after an id, or from its start): each one's id, whether it holds
    a mark, and its texts when it does. Parameters: the marks once per column, the id when
    `after`, the limit."""
    fields = _FIELDS[table]
    texts = ", ".join(f"CAST({column} AS TEXT) AS {column}" for column in fields)
    sealed = " OR ".join(_holds_mark(column) for column in fields)
    picked = ", ".join(f"CASE WHEN sealed THEN {column} END" for column in fields)
    where = "WHERE id > ? " if after else ""
    return (
        f"SELECT id, sealed, {picked} FROM ("
        f"SELECT id, {texts}, ({sealed}) AS sealed FROM {_TABLES[table]} {where}ORDER BY id LIMIT ?)"
    )


async def _window(
    db: Database, table: str, after: str | None, limit: int, rows: list[SealedRow]
) -> tuple[int, str | None]:
    """Look at the next `limit` rows of `table`, adding the sealed ones to `rows`; (how many
    rows were looked at, the last one's id)."""
    bound: list[Any] = list(SEALED_MARKS) * len(_FIELDS[table])
    if after is not None:
        bound.append(after)
    bound.append(limit)
    found = await db.fetchall(_window_sql(table, after=after is not None), bound)
    for row in found:
        if row[1]:
            texts = dict(zip(_JOB_FIELDS, (None if value is None else str(value) for value in row[2:]), strict=False))
            rows.append(
                SealedRow(
                    table=table,
                    id=str(row[0]),
                    args_json=texts.get("args"),
                    result_json=texts.get("result"),
                    progress_json=texts.get("progress"),
                )
            )
    return len(found), (str(found[-1][0]) if found else None)


async def sealed_rows(db: Database, params: SealedRowsParams) -> SealedRowPage:
    if params.limit < 1:
        raise ValueError(f"sealed_rows needs a limit of at least 1, got {params.limit}")
    table, after = parse_sealed_cursor(params.cursor)
    budget = params.limit
    rows: list[SealedRow] = []
    if table == JOBS:
        looked, last = await _window(db, JOBS, after, budget, rows)
        if looked == budget:
            return SealedRowPage(rows=rows, next_cursor=sealed_cursor(JOBS, last))
        # The jobs are done: the rest of this page's budget goes to the dead-letter rows.
        budget -= looked
        after = None
        if budget == 0:
            return SealedRowPage(rows=rows, next_cursor=DEAD_LETTER)
    looked, last = await _window(db, DEAD_LETTER, after, budget, rows)
    return SealedRowPage(rows=rows, next_cursor=f"{DEAD_LETTER}:{last}" if looked == budget else None)


async def reseal_row(db: Database, params: ResealRowParams) -> bool:
    if params.table not in _TABLES:
        raise ValueError(f"sealed rows live in the tables 'jobs' and 'dead_letter', not {params.table!r}")
    given = [
        (column, pair)
        for column, pair in zip(_JOB_FIELDS, (params.args_json, params.result_json, params.progress_json), strict=True)
        if pair is not None
    ]
    table = _TABLES[params.table]
    if any(column not in _FIELDS[params.table] for column, _ in given):
        return False  # a dead-letter row keeps no result or progress: the old text cannot match
    if not given:
        return bool(await db.fetchall(f"SELECT 1 FROM {table} WHERE id = ?", (params.id,)))
    sets = ", ".join(f"{column} = ?" for column, _ in given)
    fences = "".join(f" AND {column} IS ?" for column, _ in given)
    values: list[Any] = [new for _, (_, new) in given]
    values.append(params.id)
    values += [old for _, (old, _) in given]
    return await db.execute(f"UPDATE {table} SET {sets} WHERE id = ?{fences}", values) == 1
