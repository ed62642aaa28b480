"""Fleet-wide limits inside the memory claim.

The claim holds the store's lock from the first count to the last write, so
no other claim can slip between a check and its claim. Concurrency is counted
from the real `processing` rows at the start of each limited claim (nothing to
keep in step when a row leaves `processing` by any path); rate windows are
fixed, epoch-aligned (`soniq.backend.rules.window_start_us`) and kept per group
as (window start, claims), an older window counting as empty. Which group a row
counts in is `soniq.backend.rules.group_of`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from soniq.backend import GroupLimit, JobRecord, JobStatus, rules
from soniq.backend.rules import LimitGroup
from soniq_memory.store import MemoryStore, RateKey

Group = tuple[int, LimitGroup]
"""(index of the limit in the claim's list, the row's group under it as `rules.group_of` says)."""


def _group(index: int, limit: GroupLimit, row: JobRecord) -> Group | None:
    """The row's group under `limit`, or None when the limit does not match the row."""
    group = rules.group_of(limit, queue=row.queue, job_name=row.job_name, limit_key=row.limit_key)
    return None if group is None else (index, group)


def _rate_key(limit: GroupLimit, group: Group) -> RateKey:
    return group[1].limit, group[1].partitioned, group[1].limit_key, float(limit.rate_period)


class LimitGate:
    """Admits rows of one claim, one by one, while every matching limit still holds."""

    def __init__(self, store: MemoryStore, limits: Sequence[GroupLimit], now: datetime) -> None:
        self._store = store
        self._limits = list(limits)
        now_us = rules.epoch_us(now)
        # Each rate window is known by its start (microseconds since the epoch), as `rules.window_start_us` says.
        self._windows = [
            rules.window_start_us(now_us, limit.rate_period) if limit.rate_limit is not None else 0
            for limit in self._limits
        ]
        self._running: Counter[Group] = Counter()
        counted = [(n, limit) for n, limit in enumerate(self._limits) if limit.max_concurrent is not None]
        if counted:
            for row in store.jobs.values():
                if row.status is not JobStatus.PROCESSING:
                    continue
                for n, limit in counted:
                    group = _group(n, limit, row)
                    if group is not None:
                        self._running[group] += 1

    def _claims_in_window(self, n: int, limit: GroupLimit, group: Group) -> int:
        window, claims = self._store.rate_windows.get(_rate_key(limit, group), (None, 0))
        return claims if window == self._windows[n] else 0

    def admit(self, row: JobRecord) -> bool:
        """True (and the row counted) when claiming it keeps every matching limit."""
        groups: list[tuple[int, GroupLimit, Group]] = []
        for n, limit in enumerate(self._limits):
            group = _group(n, limit, row)
            if group is None:
                continue
            if limit.max_concurrent is not None and self._running[group] + 1 > limit.max_concurrent:
                return False
            if limit.rate_limit is not None and self._claims_in_window(n, limit, group) + 1 > limit.rate_limit:
                return False
            groups.append((n, limit, group))
        for n, limit, group in groups:
            if limit.max_concurrent is not None:
                self._running[group] += 1
            if limit.rate_limit is not None:
                claims = self._claims_in_window(n, limit, group)
                self._store.rate_windows[_rate_key(limit, group)] = (self._windows[n], claims + 1)
        return True
