"""`KeyRotationStore` on the memory store: the walk over sealed values and their compare-and-set.

A walk looks at the `jobs` rows in id order, then the dead-letter rows in id order, at most
`limit` rows a page, and returns those whose args, result or progress JSON text holds one of
`SEALED_MARKS`. The cursor is ``jobs:<last id looked at>``, then ``dead_letter`` (the start of
the dead-letter rows) and ``dead_letter:<last id looked at>``. A field's text is the row's raw
args text when it has one (`put_raw_args`), else the stored value as compact JSON; `reseal_row`
compares against exactly that text, so a value changed since the read never matches.
Picking a page's ids passes over the table's ids once (`heapq.nsmallest`, like the store's other
reads, a scan under the lock); only the rows looked at are encoded.
Every function here runs under the store's lock (the caller holds it).
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from soniq.backend import (
    ResealRowParams,
    SealedRow,
    SealedRowPage,
    SealedRowsParams,
    holds_sealed,
    parse_sealed_cursor,
    sealed_cursor,
)
from soniq_memory.store import MemoryStore

JOBS = "jobs"
DEAD_LETTER = "dead_letter"
_FIELDS = ("args", "result", "progress")


def _text(value: Any) -> str | None:
    """A stored value as the JSON text the walk returns (None: the row has no value there)."""
    if value is None:
        return None
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _window(ids: Iterable[str], after: str | None, limit: int) -> list[str]:
    """The first `limit` ids after `after`, in order."""
    return heapq.nsmallest(limit, (job_id for job_id in ids if after is None or job_id > after))


def job_texts(store: MemoryStore, job_id: str) -> tuple[str | None, str | None, str | None]:
    """(args, result, progress) of a `jobs` row as the walk returns them."""
    row = store.jobs[job_id]
    raw = store.raw_args.get(job_id)
    return (raw if raw is not None else _text(row.args), _text(row.result), _text(row.progress))


def dead_texts(store: MemoryStore, job_id: str) -> tuple[str | None, str | None, str | None]:
    """(args, result, progress) of a dead-letter row: it keeps its args only."""
    raw = store.dead_raw_args.get(job_id)
    return (raw if raw is not None else _text(store.dead_letters[job_id].args), None, None)


def sealed_rows(store: MemoryStore, params: SealedRowsParams) -> SealedRowPage:
    if params.limit < 1:
        raise ValueError(f"sealed_rows needs a limit of at least 1, got {params.limit}")
    table, after = parse_sealed_cursor(params.cursor)
    budget = params.limit
    rows: list[SealedRow] = []
    if table == JOBS:
        looked = _window(store.jobs, after, budget)
        for job_id in looked:
            texts = job_texts(store, job_id)
            if holds_sealed(*texts):
                rows.append(SealedRow(JOBS, job_id, *texts))
        if len(looked) == budget:
            return SealedRowPage(rows=rows, next_cursor=sealed_cursor(JOBS, looked[-1]))
        # The jobs are done: the rest of this page's budget goes to the dead-letter rows.
        budget -= len(looked)
        after = None
        if budget == 0:
            return SealedRowPage(rows=rows, next_cursor=DEAD_LETTER)
    looked = _window(store.dead_letters, after, budget)
    for job_id in looked:
        texts = dead_texts(store, job_id)
        if holds_sealed(*texts):
            rows.append(SealedRow(DEAD_LETTER, job_id, *texts))
    next_cursor = sealed_cursor(DEAD_LETTER, looked[-1]) if len(looked) == budget else None
    return SealedRowPage(rows=rows, next_cursor=next_cursor)


def reseal_row(store: MemoryStore, params: ResealRowParams) -> bool:
    if params.table not in (JOBS, DEAD_LETTER):
        raise ValueError(f"sealed rows live in the tables 'jobs' and 'dead_letter', not {params.table!r}")
    pairs = (params.args_json, params.result_json, params.progress_json)
    given = {name: pair for name, pair in zip(_FIELDS, pairs, strict=True) if pair is not None}
    # Parse every new value first: text that is not JSON must not leave the row half-written.
    new = {name: json.loads(pair[1]) for name, pair in given.items()}
    if params.table == JOBS:
        if params.id not in store.jobs:
            return False
        current = dict(zip(_FIELDS, job_texts(store, params.id), strict=True))
    else:
        if params.id not in store.dead_letters:
            return False
        current = dict(zip(_FIELDS, dead_texts(store, params.id), strict=True))
    if any(current[name] != old for name, (old, _) in given.items()):
        return False
    if params.table == JOBS:
        _write_job(store, params.id, {name: given[name][1] for name in given}, new)
    else:
        _write_dead(store, params.id, given["args"][1] if "args" in given else None, new.get("args"))
    return True


def _write_job(store: MemoryStore, job_id: str, texts: dict[str, str], values: dict[str, Any]) -> None:
    row = store.jobs[job_id]
    changes: dict[str, Any] = {}
    if "args" in texts:
        if job_id in store.raw_args or not isinstance(values["args"], dict):
            # Raw text stays raw text (reads decode it row by row), like `put_raw_args`.
            store.raw_args[job_id] = texts["args"]
        else:
            changes["args"] = values["args"]
    if "result" in texts:
        changes["result"] = values["result"]
    if "progress" in texts:
        # As `save_progress` keeps it: text that is not an object reads as no progress.
        changes["progress"] = values["progress"] if isinstance(values["progress"], dict) else None
    if changes:
        store.put_job(replace(row, **changes))


def _write_dead(store: MemoryStore, job_id: str, text: str | None, value: Any) -> None:
    if text is None:
        return
    if job_id in store.dead_raw_args or not isinstance(value, dict):
        store.dead_raw_args[job_id] = text
    else:
        store.dead_letters[job_id] = replace(store.dead_letters[job_id], args=value)
