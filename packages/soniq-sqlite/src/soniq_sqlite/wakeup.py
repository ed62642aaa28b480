"""In-process wake-ups: an insert through one backend instance wakes its own waiters.

Another process's insert cannot reach us (SQLite has no notification channel),
which is why the backend reports ``push_wakeup=False`` and core keeps polling.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence


class Wakeups:
    def __init__(self) -> None:
        self._waiters: list[tuple[frozenset[str] | None, asyncio.Future[None]]] = []

    async def wait(self, queues: Sequence[str] | None, timeout: float) -> None:
        """Return when `notify` names one of `queues` (None = any), or after `timeout` seconds."""
        if timeout <= 0:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (None if queues is None else frozenset(queues), future)
        self._waiters.append(entry)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(future, timeout)
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)

    def notify(self, queues: Iterable[str]) -> None:
        if not self._waiters:
            return
        names = set(queues)
        for wanted, future in self._waiters:
            if not future.done() and (wanted is None or not wanted.isdisjoint(names)):
                future.set_result(None)

    def notify_all(self) -> None:
        for _, future in self._waiters:
            if not future.done():
                future.set_result(None)


WATCHED_MAX = 10_000
"""Ids `JobChanges` remembers as watched; beyond that the oldest are forgotten (their waiters
then learn of the change at their timeout, as for a change made by another process)."""


class JobChanges:
    """In-process job changes: a finishing write to a watched row, or a cancel request, made
    through this backend instance wakes this instance's `wait_for_job_changes` callers that
    asked about the row. Rows nobody watched through this instance cost a set lookup.

    Another process's write cannot reach us (the backend reports ``push_job_changes=False``),
    so a wait that nobody here woke returns None at its timeout and core re-reads its rows.
    """

    def __init__(self) -> None:
        self._waiters: list[tuple[frozenset[str], asyncio.Future[set[str] | None]]] = []
        self._watched: dict[str, None] = {}

    def watch(self, job_ids: Iterable[str]) -> None:
        watched = self._watched
        for job_id in job_ids:
            watched.pop(job_id, None)
            watched[job_id] = None
        while len(watched) > WATCHED_MAX:
            del watched[next(iter(watched))]

    def finished(self, job_ids: Iterable[str]) -> None:
        """Rows that reached the end through this instance: wake the waiters of the watched ones."""
        watched = self._watched
        if not watched:
            return
        hit = [job_id for job_id in job_ids if job_id in watched]
        for job_id in hit:
            del watched[job_id]
        if hit:
            self.notify(hit)

    async def wait(self, job_ids: Sequence[str], timeout: float) -> set[str] | None:
        if timeout <= 0 or not job_ids:
            if timeout > 0:
                await asyncio.sleep(timeout)
            return None
        future: asyncio.Future[set[str] | None] = asyncio.get_running_loop().create_future()
        entry = (frozenset(job_ids), future)
        self._waiters.append(entry)
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return None
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)

    def notify(self, job_ids: Iterable[str]) -> None:
        if not self._waiters:
            return
        changed = set(job_ids)
        for wanted, future in self._waiters:
            hit = wanted & changed
            if hit and not future.done():
                future.set_result(set(hit))

    def notify_all(self) -> None:
        for _, future in self._waiters:
            if not future.done():
                future.set_result(None)
