"""Fleet-wide limits inside the claim on SQLite.

A limited claim runs whole inside one ``BEGIN IMMEDIATE`` on aiosqlite's thread
(`Database.transaction_raw`). SQLite has one writer per file, so while it counts, no
other claim, in any process, can move a row into or out of `processing`: the counts it
reads and the rows it marks cannot interleave with another claim's. Nothing is kept in
memory between claims; every number comes from the file:

- `processing` rows per group, from the covering partial index ``soniq_jobs_running_groups``
  (it holds in-flight rows only, so the read is as small as the fleet's work in hand);
- claims per rate window, from ``soniq_rate_windows`` (one row per group and epoch-aligned
  window, bumped by the claims it counts; a group's older windows are deleted when it opens a new one).

Which group a row counts in is core's `soniq.backend.rules.group_of`, and the window a claim
falls in `soniq.backend.rules.window_start_us`; this module only counts and stores.

Rows come in claim order, a page at a time. A row whose group is full is passed over and
its group is left out of the next pages, so a full group with a long backlog never keeps
the rows behind it waiting. The writes a limited claim adds are the window bumps of the
rate-limited groups it claimed from; an unlimited claim does none of this.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from soniq.backend import GroupLimit, LimitScope, rules
from soniq.backend.rules import LimitGroup
from soniq_sqlite.codec import now_us
from soniq_sqlite.schema import CLAIM_INDEX_ANY_QUEUE, CLAIM_INDEX_BY_QUEUE, CLAIMABLE, JOB_COLUMNS

PAGE_MIN = 64
PAGE_MAX = 1000
SCAN_MAX = 20_000
"""Rows one claim reads at most: a bound on how long it holds the write lock."""
EXCLUSIONS_MAX = 64
"""Full groups written into the page query as exclusions; beyond that they are skipped in Python."""

Group = tuple[int, LimitGroup]
"""(limit's position in `limits`, the row's group under it as `rules.group_of` says)."""


@dataclass(frozen=True, slots=True)
class _Rule:
    limit: GroupLimit
    period_us: int


@dataclass(frozen=True, slots=True)
class LimitedClaim:
    worker_id: str
    queues: tuple[str, ...] | None
    name_clause: str
    """An extra ``AND ...`` condition on job names (empty for none), with `name_params`."""
    name_params: tuple[Any, ...]
    limit: int
    mark_started: bool


def _groups(limited: Sequence[_Rule], queue: str, job_name: str, limit_key: str | None) -> list[Group]:
    found: list[Group] = []
    for index, rule in enumerate(limited):
        group = rules.group_of(rule.limit, queue=queue, job_name=job_name, limit_key=limit_key)
        if group is not None:
            found.append((index, group))
    return found


def _window_key(rule: _Rule, group: Group) -> str:
    _, of = group
    suffix = "" if not of.partitioned else ("|-" if of.limit_key is None else f"|={of.limit_key}")
    return f"{rule.limit.key}|{rule.period_us}{suffix}"


class _Counts:
    """The numbers a claim checks, read lazily from the file inside the transaction."""

    def __init__(self, raw: sqlite3.Connection, limited: Sequence[_Rule], now: int) -> None:
        self.raw, self.limited, self.now = raw, limited, now
        self.running: Counter[Group] = self._running()
        self.windows: dict[Group, int | None] = {}
        self.taken: Counter[Group] = Counter()

    def _running(self) -> Counter[Group]:
        counted = [rule for rule in self.limited if rule.limit.max_concurrent is not None]
        running: Counter[Group] = Counter()
        if not counted:
            return running
        queues = sorted({r.limit.name for r in counted if LimitScope(r.limit.scope) is LimitScope.QUEUE})
        names = sorted({r.limit.name for r in counted if LimitScope(r.limit.scope) is LimitScope.JOB})
        terms, values = [], []
        if queues:
            terms.append(f"queue IN ({', '.join('?' for _ in queues)})")
            values += queues
        if names:
            terms.append(f"job_name IN ({', '.join('?' for _ in names)})")
            values += names
        rows = self.raw.execute(
            "SELECT queue, job_name, limit_key, count(*) FROM soniq_jobs INDEXED BY soniq_jobs_running_groups "
            f"WHERE status = 'processing' AND ({' OR '.join(terms)}) GROUP BY queue, job_name, limit_key",
            values,
        ).fetchall()
        for queue, job_name, limit_key, count in rows:
            for group in _groups(self.limited, queue, job_name, limit_key):
                running[group] += int(count)
        return running

    def window(self, group: Group) -> int:
        if group not in self.windows:
            rule = self.limited[group[0]]
            start = rules.window_start_us(self.now, rule.limit.rate_period)
            row = self.raw.execute(
                "SELECT claims FROM soniq_rate_windows WHERE group_key = ? AND window_start = ?",
                (_window_key(rule, group), start),
            ).fetchone()
            self.windows[group] = None if row is None else int(row[0])
        return self.windows[group] or 0

    def fits(self, group: Group) -> bool:
        """One more claim of the group keeps every number of its limit within bounds."""
        limit = self.limited[group[0]].limit
        more = self.taken[group] + 1
        if limit.max_concurrent is not None and self.running[group] + more > limit.max_concurrent:
            return False
        return limit.rate_limit is None or self.window(group) + more <= limit.rate_limit

    def bump_windows(self) -> None:
        for group, taken in self.taken.items():
            rule = self.limited[group[0]]
            if rule.limit.rate_limit is None or not taken:
                continue
            key, start = _window_key(rule, group), rules.window_start_us(self.now, rule.limit.rate_period)
            self.raw.execute(
                "INSERT INTO soniq_rate_windows (group_key, window_start, claims) VALUES (?, ?, ?) "
                "ON CONFLICT (group_key, window_start) DO UPDATE SET claims = claims + excluded.claims",
                (key, start, taken),
            )
            if self.windows.get(group) is None:
                # This claim opened the window: the group's earlier windows count nothing any more.
                self.raw.execute(
                    "DELETE FROM soniq_rate_windows WHERE group_key = ? AND window_start < ?", (key, start)
                )


def _exclusion(limited: Sequence[_Rule], group: Group) -> tuple[str, tuple[Any, ...]]:
    limit = limited[group[0]].limit
    column = "queue" if LimitScope(limit.scope) is LimitScope.QUEUE else "job_name"
    if not group[1].partitioned:
        return f"{column} <> ?", (limit.name,)
    return f"NOT ({column} = ? AND limit_key IS ?)", (limit.name, group[1].limit_key)


def claim_limited(raw: sqlite3.Connection, claim: LimitedClaim, limits: Sequence[GroupLimit]) -> list[sqlite3.Row]:
    """Inside the caller's ``BEGIN IMMEDIATE``: mark up to `claim.limit` due claimable rows
    `processing`, in claim order, each only while every limit matching it holds; the marked
    rows (`JOB_COLUMNS`). See `Backend.claim_jobs`, "Limits"."""
    # The store's clock read once the write lock is held: a stamp taken before waiting for the
    # lock could predate the completion that made a row claimable.
    now = now_us()
    limited = [
        _Rule(limit, rules.rate_period_us(limit.rate_period))
        for limit in limits
        if limit.max_concurrent is not None or limit.rate_limit is not None
    ]
    counts = _Counts(raw, limited, now)
    queues = None if claim.queues is None else list(claim.queues)
    full: set[Group] = set()
    chosen: list[str] = []
    after: tuple[Any, ...] | None = None
    page_size = min(max(claim.limit * 2, PAGE_MIN), PAGE_MAX)
    scanned = 0
    while len(chosen) < claim.limit and scanned < SCAN_MAX and (queues is None or queues):
        where = [CLAIMABLE, "scheduled_at <= ?"]
        values: list[Any] = [now]
        if queues is not None:
            where.append(f"queue IN ({', '.join('?' for _ in queues)})")
            values += queues
        if claim.name_clause:
            where.append(claim.name_clause)
            values += claim.name_params
        for group in sorted(full, key=repr)[:EXCLUSIONS_MAX]:
            term, term_values = _exclusion(limited, group)
            where.append(term)
            values += term_values
        if after is not None:
            where.append("(priority, scheduled_at, created_at, id) > (?, ?, ?, ?)")
            values += after
        index = CLAIM_INDEX_ANY_QUEUE if queues is None else CLAIM_INDEX_BY_QUEUE
        page = raw.execute(
            f"SELECT id, queue, job_name, limit_key, priority, scheduled_at, created_at FROM soniq_jobs "
            f"INDEXED BY {index} WHERE {' AND '.join(where)} "
            "ORDER BY priority, scheduled_at, created_at, id LIMIT ?",
            (*values, page_size),
        ).fetchall()
        scanned += len(page)
        for job_id, queue, job_name, limit_key, *_ in page:
            groups = _groups(limited, queue, job_name, limit_key)
            blocked = [group for group in groups if group in full or not counts.fits(group)]
            if blocked:
                full.update(blocked)
                continue
            chosen.append(job_id)
            counts.taken.update(groups)
            if len(chosen) == claim.limit:
                break
        if len(page) < page_size:
            break
        after = (*page[-1][4:7], page[-1][0])
        if queues is not None:
            # A full queue-wide group leaves the queue list itself: its rows are not even visited.
            whole = {
                limited[group[0]].limit.name
                for group in full
                if not group[1].partitioned and LimitScope(limited[group[0]].limit.scope) is LimitScope.QUEUE
            }
            queues = [queue for queue in queues if queue not in whole]
    if not chosen:
        return []
    claimed = raw.execute(
        "UPDATE soniq_jobs SET status = 'processing', worker_id = ?, updated_at = ?, started_at = ?, "
        f"dedup_key = NULL WHERE id IN ({', '.join('?' for _ in chosen)}) AND {CLAIMABLE} "
        f"RETURNING {JOB_COLUMNS}",
        (claim.worker_id, now, now if claim.mark_started else None, *chosen),
    ).fetchall()
    counts.bump_windows()
    return claimed
