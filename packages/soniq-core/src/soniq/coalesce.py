"""Coalesced writes: a value a handler may change thousands of times a second is written at most
once per interval, and once more, promptly, when the run ends.

The writer always writes the latest state (a whole value, never a delta), so a write that is
cut off, or repeated, leaves the store correct after the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

__all__ = ["CoalescedWriter"]


class CoalescedWriter:
    """Calls `write()` soon after `mark()`, at most once per `interval` seconds; `flush()` writes
    what is still pending at once. `mark` and `flush` run on the writer's event loop."""

    def __init__(self, write: Callable[[], Awaitable[None]], interval: float) -> None:
        self._write = write
        self._interval = interval
        self._dirty = False
        self._last = float("-inf")
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def mark(self) -> None:
        """Note that the value changed; the first change writes at once, later ones after the interval."""
        if self._closed:
            return
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._dirty:
            wait = self._last + self._interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._dirty = False
            self._last = time.monotonic()
            await self._write()

    async def flush(self) -> None:
        """Stop the timer and write now if anything is pending; nothing is written after this."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._dirty = True  # the cancelled write may not have reached the store
        if self._dirty:
            self._dirty = False
            await self._write()
