"""Noticing that a store is used from another event loop than the one it connected on."""

from __future__ import annotations

import asyncio


class EventLoopBinding:
    """Remembers the event loop a store's connections, locks and tasks belong to.

    Driver connections and asyncio locks are bound to the loop that made them. A script
    that calls ``asyncio.run`` twice, or a framework that makes a loop per request, uses
    one backend from several loops in turn, and by then the first loop has usually ended:
    its connections can be neither used nor closed politely. Call `moved()` at the top of
    every operation (one identity check); when it says True, drop the old connections
    unawaited and let the next statement reconnect on the current loop.
    """

    __slots__ = ("_loop",)

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def moved(self) -> bool:
        """True when the running loop differs from the one seen before (not on the first call);
        the running loop becomes the remembered one either way."""
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return False
        previous, self._loop = self._loop, loop
        return previous is not None

    def forget(self) -> None:
        """Start over: the next `moved()` only records the loop it runs on."""
        self._loop = None
