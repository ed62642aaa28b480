"""`KeyRotationStore` on PostgreSQL: keyset pages over sealed values, and their compare-and-set.

A page looks at most `limit` rows: the next ones of `soniq_jobs` in id order (a range scan of its
primary key), then, once those are done, the next ones of `soniq_dead_letter_jobs`, and returns
those whose args, result or progress text holds one of `SEALED_MARKS`. The marks are found with
``strpos`` on the stored text (not LIKE, where ``_`` is a wildcard), after the LIMIT: a page costs
at most `limit` index steps whatever the table's size or the share of sealed rows in it, and may
hold no row at all before the last page. The cursor is ``jobs:<last id looked at>``, then
``dead_letter:<last id looked at>``; a page that finds the jobs done goes on to the dead letters.

`reseal_row` is one ``UPDATE ... WHERE id = $1 AND col::text = $old ...``: each given column is
written only if its stored text is still the text the walk returned, all of them or none. The
columns are `json`, which keeps its input text as it was, so the text returned by the walk is
exactly what is stored; a text comparison is the contract's "as the text returned", and it never
fails where a ``::jsonb`` cast would (jsonb refuses ``\\u0000``, which a `json` column may hold).
Dead-letter rows keep their args only, so a result or progress given for one never matches.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from soniq.backend import (
    SEALED_MARKS,
    ResealRowParams,
    SealedRow,
    SealedRowPage,
    SealedRowsParams,
    parse_sealed_cursor,
    sealed_cursor,
)
from soniq_postgres.options import quote_ident
from soniq_postgres.rows import affected

JOBS = "jobs"
DEAD_LETTER = "dead_letter"
_JOB_FIELDS = ("args", "result", "progress")
_FIELDS = {JOBS: _JOB_FIELDS, DEAD_LETTER: ("args",)}
"""The JSON columns each table keeps (a dead-letter row keeps no result or progress)."""


class KeyRotationSql:
    """SQL text for one schema."""

    def __init__(self, schema: str) -> None:
        s = quote_ident(schema)
        self.tables = {JOBS: f"{s}.soniq_jobs", DEAD_LETTER: f"{s}.soniq_dead_letter_jobs"}
        # (table, from an id) -> the page statement; $1 the limit, $2 the id when after one.
        self.pages = {
            (table, after): _page_sql(name, _FIELDS[table], after=after)
            for table, name in self.tables.items()
            for after in (False, True)
        }


def _page_sql(table: str, fields: tuple[str, ...], *, after: bool) -> str:
    """The next `$1` rows of `table` (after the id `$2`, or from its start), in id order: each
    one's id, whether its text holds a mark, and its texts only when it does."""
    texts = ", ".join(f"{column}::text AS {column}" for column in fields)
    holds = " OR ".join(f"strpos({column}, {_literal(mark)}) > 0" for column in fields for mark in SEALED_MARKS)
    picked = ", ".join(f"CASE WHEN sealed THEN {column} END AS {column}" for column in fields)
    where = "WHERE id > $2 " if after else ""
    # The filter sits outside the LIMIT: the scan stops after $1 rows, sealed or not.
    return f"""
SELECT id, sealed, {picked} FROM (
    SELECT id, {", ".join(fields)}, COALESCE({holds}, false) AS sealed
    FROM (SELECT id, {texts} FROM {table} {where}ORDER BY id LIMIT $1) AS page
) AS looked
ORDER BY id"""


def _literal(text: str) -> str:
    """`text` as an SQL string literal (E'' form, so backslashes mean the same whatever
    ``standard_conforming_strings`` says)."""
    return "E'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


async def _look(
    conn: asyncpg.Connection, sql: KeyRotationSql, table: str, after: str | None, limit: int, rows: list[SealedRow]
) -> tuple[int, str | None]:
    """Look at the next `limit` rows of `table`, adding the sealed ones to `rows`; (how many rows
    were looked at, the last one's id)."""
    args: tuple[Any, ...] = (limit,) if after is None else (limit, after)
    found = await conn.fetch(sql.pages[(table, after is not None)], *args)
    for row in found:
        if row["sealed"]:
            rows.append(
                SealedRow(
                    table=table,
                    id=row["id"],
                    args_json=row["args"],
                    result_json=row.get("result"),
                    progress_json=row.get("progress"),
                )
            )
    return len(found), (found[-1]["id"] if found else None)


async def sealed_rows(conn: asyncpg.Connection, sql: KeyRotationSql, params: SealedRowsParams) -> SealedRowPage:
    if params.limit < 1:
        raise ValueError(f"sealed_rows needs a limit of at least 1, got {params.limit}")
    table, after = parse_sealed_cursor(params.cursor)
    budget = params.limit
    rows: list[SealedRow] = []
    if table == JOBS:
        looked, last = await _look(conn, sql, JOBS, after, budget, rows)
        if looked == budget:
            return SealedRowPage(rows=rows, next_cursor=sealed_cursor(JOBS, last))
        # Fewer than asked: the jobs are done, and the rest of this page goes to the dead letters.
        budget -= looked
        after = None
    looked, last = await _look(conn, sql, DEAD_LETTER, after, budget, rows)
    return SealedRowPage(rows=rows, next_cursor=sealed_cursor(DEAD_LETTER, last) if looked == budget else None)


async def reseal_row(conn: asyncpg.Connection, sql: KeyRotationSql, params: ResealRowParams) -> bool:
    if params.table not in _FIELDS:
        raise ValueError(f"sealed rows live in the tables 'jobs' and 'dead_letter', not {params.table!r}")
    pairs = (params.args_json, params.result_json, params.progress_json)
    given = [(column, pair) for column, pair in zip(_JOB_FIELDS, pairs, strict=True) if pair is not None]
    table = sql.tables[params.table]
    if any(column not in _FIELDS[params.table] for column, _ in given):
        return False  # a dead-letter row keeps no result or progress: the old text cannot match
    if not given:
        return bool(await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {table} WHERE id = $1)", params.id))
    # $1 the id, then each given column's new text, then its old text.
    count = len(given)
    sets = ", ".join(f"{column} = ${2 + i}::json" for i, (column, _) in enumerate(given))
    fences = "".join(f" AND {column}::text = ${2 + count + i}" for i, (column, _) in enumerate(given))
    values = [new for _, (_, new) in given] + [old for _, (old, _) in given]
    return affected(await conn.execute(f"UPDATE {table} SET {sets} WHERE id = $1{fences}", params.id, *values)) == 1
