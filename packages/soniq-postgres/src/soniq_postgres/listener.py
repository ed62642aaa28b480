"""One LISTEN connection per backend that wakes every local waiter.

The connection lives outside the pool (a pooled connection cannot hold a
LISTEN across releases) and is supervised by a background task: when the
server drops it, the task reconnects with exponential backoff, and while it
is down waiters simply sleep out their timeout. A reconnect wakes everyone,
since notifications sent while it was down are lost.

Every notification bumps a counter, per queue named in the payload (an empty
payload means "any queue"). A caller that remembers the counter from before
its last claim can then tell that something arrived in between, closing the
gap between an empty claim and the next wait.

Job changes arrive on a second channel of the same connection,
one job id per notification. Each wakes the waiters for that id; a change
that finds no waiter is kept (a bounded, oldest-first memory) until a wait
for that id takes it, so a change published between a caller's read and its
wait is not lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

import asyncpg

log = logging.getLogger("soniq_postgres.listener")

INITIAL_BACKOFF = 0.05
MAX_BACKOFF = 5.0
PING_INTERVAL = 15.0
KEPT_CHANGES = 10_000
"""Changes nobody waited for yet, kept per process for a later wait (the oldest go first)."""


class NotificationListener:
    def __init__(
        self,
        *,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        channel: str,
        changes_channel: str | None = None,
        ping_interval: float = PING_INTERVAL,
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._changes_channel = changes_channel
        self._change_waiters: set[tuple[frozenset[str], asyncio.Future[set[str] | None]]] = set()
        self._unclaimed: OrderedDict[str, None] = OrderedDict()
        self._ping_interval = ping_interval
        self._task: asyncio.Task[None] | None = None
        self._connection: asyncpg.Connection | None = None
        self._first_attempt = asyncio.Event()
        self._waiters: set[tuple[frozenset[str] | None, asyncio.Future[None]]] = set()
        self._sequence = 0
        self._any_sequence = 0
        self._queue_sequence: dict[str, int] = {}
        self.reconnects = 0

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.is_closed()

    @property
    def server_pid(self) -> int | None:
        connection = self._connection
        return None if connection is None else int(connection.get_server_pid())

    async def start(self, *, wait: float) -> None:
        """Start supervising; wait up to `wait` seconds for the first LISTEN."""
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"soniq-listen:{self._channel}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first_attempt.wait(), wait)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._wake(None)
        self._wake_changes(None)

    def sequence_for(self, queues: Sequence[str] | None) -> int:
        """The counter of the latest notification relevant to `queues`."""
        if queues is None:
            return self._sequence
        latest = self._any_sequence
        for queue in queues:
            latest = max(latest, self._queue_sequence.get(queue, 0))
        return latest

    async def wait(self, *, queues: Sequence[str] | None, timeout: float) -> None:
        """Return on a relevant notification, a reconnect, or after `timeout`."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (None if queues is None else frozenset(queues), future)
        self._waiters.add(entry)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(future), timeout)
        finally:
            self._waiters.discard(entry)

    async def wait_changes(self, job_ids: Collection[str], *, timeout: float) -> set[str] | None:
        """The ids among `job_ids` with a change, returned on the first one (or one kept from
        before the call); an empty set after `timeout`; None after a reconnect (changes may be lost)."""
        wanted = frozenset(job_ids)
        kept = {job_id for job_id in wanted if job_id in self._unclaimed}
        if kept:
            for job_id in kept:
                del self._unclaimed[job_id]
            return kept
        future: asyncio.Future[set[str] | None] = asyncio.get_running_loop().create_future()
        entry = (wanted, future)
        self._change_waiters.add(entry)
        try:
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(asyncio.shield(future), timeout)
            return set()
        finally:
            self._change_waiters.discard(entry)

    def _on_change(self, connection: Any, pid: int, channel: str, payload: str) -> None:
        if not payload:
            return
        if not self._wake_changes(payload):
            self._unclaimed.pop(payload, None)
            self._unclaimed[payload] = None
            while len(self._unclaimed) > KEPT_CHANGES:
                self._unclaimed.popitem(last=False)

    def _wake_changes(self, job_id: str | None) -> bool:
        """Wake the waiters for `job_id` (None: every waiter, with None); whether any was woken."""
        woken = False
        for wanted, future in list(self._change_waiters):
            if future.done():
                continue
            if job_id is None:
                future.set_result(None)
            elif job_id in wanted:
                future.set_result({job_id})
                woken = True
        return woken

    def _on_notification(self, connection: Any, pid: int, channel: str, payload: str) -> None:
        queues = [name for name in payload.split(",") if name] if payload else []
        self._sequence += 1
        if not queues:
            self._any_sequence = self._sequence
            self._wake(None)
            return
        for queue in queues:
            self._queue_sequence[queue] = self._sequence
        self._wake(frozenset(queues))

    def _wake(self, queues: frozenset[str] | None) -> None:
        for wanted, future in list(self._waiters):
            if future.done():
                continue
            if queues is None or wanted is None or wanted & queues:
                future.set_result(None)

    async def _supervise(self) -> None:
        backoff = INITIAL_BACKOFF
        while True:
            lost = asyncio.Event()
            try:
                connection = await self._connect()
                connection.add_termination_listener(functools.partial(_set_event, lost))
                await connection.add_listener(self._channel, self._on_notification)
                if self._changes_channel is not None:
                    await connection.add_listener(self._changes_channel, self._on_change)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("LISTEN %s failed (%s); retrying in %.2fs", self._channel, exc, backoff)
                self._first_attempt.set()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            if self._first_attempt.is_set():
                self.reconnects += 1
                # Anything sent while we were down is lost: let every waiter re-check.
                self._sequence += 1
                self._any_sequence = self._sequence
                self._wake(None)
                self._wake_changes(None)
            self._connection = connection
            self._first_attempt.set()
            backoff = INITIAL_BACKOFF
            try:
                await self._hold(connection, lost)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("LISTEN connection on %s failed: %s", self._channel, exc)
            finally:
                self._connection = None
                await _discard(connection)
            log.warning("LISTEN connection on %s lost; reconnecting", self._channel)

    async def _hold(self, connection: asyncpg.Connection, lost: asyncio.Event) -> None:
        """Return when the connection is gone; a ping catches silently dead sockets."""
        while not lost.is_set() and not connection.is_closed():
            try:
                await asyncio.wait_for(lost.wait(), self._ping_interval)
            except TimeoutError:
                await asyncio.wait_for(connection.fetchval("SELECT 1"), self._ping_interval)


def _set_event(event: asyncio.Event, _connection: Any) -> None:
    event.set()


async def _discard(connection: asyncpg.Connection) -> None:
    if connection.is_closed():
        return
    try:
        await asyncio.wait_for(connection.close(), 2.0)
    except asyncio.CancelledError:
        connection.terminate()
        raise
    except Exception:
        connection.terminate()
