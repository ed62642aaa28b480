"""The overview served from a snapshot kept fresh in the background (stale-while-revalidate).

Its exact counts read every row of `soniq_jobs` (the per-queue counts and the
day's done rows), which takes longer than a page may at a million rows, and
every watcher's live fragment would repeat that work each poll. Instead one
task per dashboard app refreshes the snapshot every poll interval while
someone has asked within the last few intervals, with at most one refresh in
flight; requests answer from the latest snapshot at once and show its time.
Only the first request (or the first after the event loop changed, as it does
between test clients) waits, for the first snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, TypeVar

_T = TypeVar("_T")
logger = logging.getLogger(__name__)

# How many poll intervals without a request before the refresh task stops.
IDLE_INTERVALS = 3


@dataclass(frozen=True, slots=True)
class Snapshot(Generic[_T]):
    value: _T
    as_of: datetime
    """When the refresh that read `value` started."""


class Refresher(Generic[_T]):
    def __init__(self, load: Callable[[], Awaitable[_T]], interval: float) -> None:
        self._load = load
        self.interval = interval
        self._latest: Snapshot[_T] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: asyncio.Task[None] | None = None
        self._inflight: asyncio.Task[Snapshot[_T]] | None = None
        self._seen = 0.0

    async def get(self) -> Snapshot[_T]:
        """The latest snapshot; waits for the first one, and (re)starts the refresh task."""
        self._seen = time.monotonic()
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # Tasks of another loop are dead to this one, and their snapshot is as old as that loop.
            self._loop, self._runner, self._inflight, self._latest = loop, None, None, None
        if self._runner is None or self._runner.done():
            self._runner = loop.create_task(self._run(), name="soniq-dashboard-overview")
        if self._latest is None:
            # shield: a client hanging up must not cancel the refresh other requests are waiting on.
            return await asyncio.shield(self._refresh())
        return self._latest

    def _refresh(self) -> asyncio.Task[Snapshot[_T]]:
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.get_running_loop().create_task(self._read())
        return self._inflight

    async def _read(self) -> Snapshot[_T]:
        as_of = datetime.now(UTC)
        snapshot = Snapshot(await self._load(), as_of)
        if self._latest is None or self._latest.as_of <= as_of:
            self._latest = snapshot
        return snapshot

    async def _run(self) -> None:
        while time.monotonic() - self._seen <= IDLE_INTERVALS * self.interval:
            task = self._refresh()
            await asyncio.wait([task])
            if not task.cancelled() and task.exception() is not None:
                # The page keeps the last good snapshot (its time shows how old); the next round retries.
                logger.warning("overview refresh failed", exc_info=task.exception())
            await asyncio.sleep(self.interval)

    async def close(self) -> None:
        for task in (self._runner, self._inflight):
            if task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._runner = self._inflight = None
