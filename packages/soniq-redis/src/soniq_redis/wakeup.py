"""Push wake-up: one pub/sub subscription per backend instance.

The enqueue, requeue and replay scripts PUBLISH the queue name on
``<prefix>new_job`` whenever they put a row back in a queue (due or scheduled:
a waiter re-reads the earliest scheduled time). A single background task per
backend listens and resolves the waiters whose queues match; every waiter of a
worker shares it. While the subscription is down the task reconnects with a
backoff and waiters simply sleep out their timeout, which is always allowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from soniq_redis.connection import is_connection_failure

log = logging.getLogger("soniq_redis")

_IDLE_CHECK_SECONDS = 15.0
_MAX_BACKOFF_SECONDS = 2.0


@dataclass(eq=False, slots=True)
class _Waiter:
    queues: frozenset[str] | None
    future: asyncio.Future[None]

    def wants(self, queue: str) -> bool:
        return self.queues is None or queue in self.queues


class WakeupListener:
    """Counts wake-up messages and resolves matching waiters."""

    def __init__(self, client: Redis, channel: str) -> None:
        self._client = client
        self._channel = channel
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._online = False
        self._waiters: set[_Waiter] = set()
        self.generation = 0
        self._generation_by_queue: dict[str, int] = {}
        # Bumped on a re-subscription: messages sent during an outage are lost,
        # so every waiter should look again.
        self._generation_for_all = 0

    @property
    def online(self) -> bool:
        return self._online

    async def start(self, *, ready_timeout: float = 2.0) -> None:
        """Subscribe (once); wait briefly for the subscription to be confirmed."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="soniq-redis-wakeup")
        if not self._ready.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), ready_timeout)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # Bounded: a subscription stuck in a socket read must not hold up the process's exit.
            await asyncio.wait([task], timeout=2.0)
        self._online = False
        for waiter in self._waiters:
            if not waiter.future.done():
                waiter.future.set_result(None)

    def seen_since(self, queues: Sequence[str] | None, generation: int) -> bool:
        """Whether a matching message arrived after `generation` was read."""
        if queues is None or self._generation_for_all > generation:
            return self.generation > generation
        return any(self._generation_by_queue.get(queue, 0) > generation for queue in queues)

    async def wait(self, *, queues: Sequence[str] | None, timeout: float, since: int) -> None:
        if timeout <= 0:
            return
        if not self._online:
            await asyncio.sleep(timeout)
            return
        if self.seen_since(queues, since):
            return
        waiter = _Waiter(None if queues is None else frozenset(queues), asyncio.get_running_loop().create_future())
        self._waiters.add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.future, timeout)
        finally:
            self._waiters.discard(waiter)

    def _note(self, queue: str | None) -> None:
        """A message for `queue`, or (None) a reason for every waiter to look again."""
        self.generation += 1
        if queue is None:
            self._generation_for_all = self.generation
        else:
            self._generation_by_queue[queue] = self.generation
        for waiter in self._waiters:
            if (queue is None or waiter.wants(queue)) and not waiter.future.done():
                waiter.future.set_result(None)

    async def _run(self) -> None:
        backoff = 0.05
        reconnecting = False
        while True:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._channel)
                self._online = True
                self._ready.set()
                backoff = 0.05
                if reconnecting:
                    self._note(None)
                reconnecting = True
                loop = asyncio.get_running_loop()
                last_heard = loop.time()
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=_IDLE_CHECK_SECONDS)
                    if message is not None:
                        last_heard = loop.time()
                        if message.get("type") == "message":
                            self._note(str(message["data"]))
                    elif loop.time() - last_heard >= _IDLE_CHECK_SECONDS:
                        # Quiet for a while: a PING (its pong is a message) tells
                        # a live link from a dead one.
                        last_heard = loop.time()
                        await pubsub.ping()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not is_connection_failure(exc):
                    log.exception("soniq-redis wake-up listener failed; retrying")
                else:
                    log.debug("soniq-redis wake-up subscription lost: %s", exc)
                self._online = False
                self._ready.set()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_SECONDS)
            finally:
                self._online = False
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
