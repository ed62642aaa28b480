"""The private event loop behind `app.enqueue_sync` and friends.

Synchronous producers (Flask and Django views, scripts, threads of a pool)
have no loop of their own, or have one running elsewhere that they must not
block on. Each app that is used this way gets one daemon thread running one
loop, started on first use; calls from any thread are handed to it and wait
for their result. Where a second backend instance is the same queue (every
backend but an unnamed ``memory://``) the thread uses its own, so no
connection is ever shared between two loops.

The thread is stopped by `close()` and before the interpreter joins its
threads at exit, so a script that never closes the app still exits.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from soniq.errors import SoniqError

if TYPE_CHECKING:
    from soniq.app_context import AppContext
    from soniq.backend import QueueStore

T = TypeVar("T")

CLOSE_TIMEOUT = 5.0
"""How long closing the thread's backend may take at `close()` or exit before the thread is left behind."""

_live: weakref.WeakSet[SyncBridge] = weakref.WeakSet()


def _close_all_at_exit() -> None:
    for bridge in list(_live):
        bridge.close()


# Runs before the interpreter joins non-daemon threads (a driver's own thread would otherwise keep
# the process alive); `atexit` runs only after that join.
_register = getattr(threading, "_register_atexit", None)
if _register is not None:
    _register(_close_all_at_exit)
else:  # pragma: no cover - other interpreters
    import atexit

    atexit.register(_close_all_at_exit)


class SyncBridge:
    """One app's loop thread. It holds the app's context weakly: a bridge never keeps its app alive."""

    def __init__(self, context: AppContext) -> None:
        self._context = weakref.ref(context)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._backend: QueueStore | None = None
        self._backend_connected = False
        self._backend_lock: asyncio.Lock | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self, make: Coroutine[Any, Any, T], *, what: str) -> T:
        """Run `make` on the bridge's loop and wait for it; refused on a thread whose loop is running."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            make.close()
            raise SoniqError(
                f"{what}_sync() was called from a running event loop, where waiting would block it; "
                f"use `await app.{what}(...)` there"
            )
        loop = self._start()
        future = asyncio.run_coroutine_threadsafe(make, loop)
        return future.result()

    def backend_for_running_loop(self) -> Awaitable[QueueStore] | None:
        """The bridge's backend (connected) when called on the bridge's loop, else None."""
        loop = self._loop
        if loop is None:
            return None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return None
        if running is not loop:
            return None
        return self._connected_backend()

    async def _connected_backend(self) -> QueueStore:
        context = self._context()
        if context is None:  # pragma: no cover - the app owns the bridge
            raise SoniqError("the app behind this sync bridge is gone")
        if self._backend is None:
            self._backend = context.new_backend_instance()
        if self._backend is None:
            # One shared instance (a ready-made backend or an in-process store): the app's own.
            await context.connect()
            return context.backend
        if not self._backend_connected:
            if self._backend_lock is None:
                self._backend_lock = asyncio.Lock()
            async with self._backend_lock:
                if not self._backend_connected:
                    await self._backend.connect()
                    self._backend_connected = True
        return self._backend

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is not None and self.running:
                return self._loop
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            thread = threading.Thread(target=serve, name="soniq-sync-loop", daemon=True)
            thread.start()
            ready.wait()
            self._loop, self._thread = loop, thread
            _live.add(self)
            return loop

    def close(self) -> None:
        """Close the bridge's backend and stop its thread; safe to call from any thread but the bridge's."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        if thread is threading.current_thread():
            raise SoniqError("close() cannot stop the sync bridge from its own thread")
        if thread.is_alive():
            closing = asyncio.run_coroutine_threadsafe(self._close_backend(), loop)
            try:
                closing.result(timeout=CLOSE_TIMEOUT)
            except Exception:
                closing.cancel()
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=CLOSE_TIMEOUT)
        if not thread.is_alive():
            loop.close()
        _live.discard(self)

    async def _close_backend(self) -> None:
        backend, connected = self._backend, self._backend_connected
        self._backend, self._backend_connected, self._backend_lock = None, False, None
        if backend is not None and connected:
            await backend.close()
