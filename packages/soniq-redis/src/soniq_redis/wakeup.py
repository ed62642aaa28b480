"""Push wake-up and job changes: one pub/sub subscription per backend instance.

The enqueue, requeue and replay scripts PUBLISH the queue name on
``<prefix>new_job`` whenever they put a row back in a queue (due or scheduled:
a waiter re-reads the earliest scheduled time). A single background task per
backend listens and resolves the waiters whose queues match; every waiter of a
worker shares it. While the subscription is down the task reconnects with a
backoff and waiters simply sleep out their timeout, which is always allowed.

The same subscription listens on ``<prefix>job_changes``: the
scripts that finish a watched row, and every cancel request, publish the job's
id there, and the task hands each id to the `wait_changes` callers waiting for
it. An id that arrives while nobody waits for it is kept (a bounded number of
them) and returned at once by the next call that asks for it, so a change
landing between two waits is not lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from soniq_redis.connection import is_connection_failure

log = logging.getLogger("soniq_redis")

_IDLE_CHECK_SECONDS = 15.0
_MAX_BACKOFF_SECONDS = 2.0
# Changes nobody was waiting for, kept for the next wait (the oldest go first).
_UNSEEN_CHANGES_KEPT = 10_000


@dataclass(eq=False, slots=True)
class _Waiter:
    queues: frozenset[str] | None
    future: asyncio.Future[None]

    def wants(self, queue: str) -> bool:
        return self.queues is None or queue in self.queues


@dataclass(eq=False, slots=True)
class _ChangeWaiter:
    job_ids: frozenset[str]
    future: asyncio.Future[set[str] | None]


class WakeupListener:
    """Counts wake-up messages and resolves matching waiters; hands job changes to their waiters."""

    def __init__(self, client: Redis, channel: str, changes_channel: str | None = None) -> None:
        self._client = client
        self._channel = channel
        self._changes_channel = changes_channel
        self._change_waiters: dict[str, set[_ChangeWaiter]] = {}
        self._unseen_changes: OrderedDict[str, None] = OrderedDict()
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
        self._all_changes_unknown()

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

    async def wait_changes(self, job_ids: Sequence[str], timeout: float) -> set[str] | None:
        """The ids among `job_ids` whose change was published, once one is; None when changes
        may have been missed (the subscription was down or has just come up: re-read them all)."""
        wanted = frozenset(job_ids)
        if not self._online:
            await self.start(ready_timeout=min(max(timeout, 0.0), 2.0))
            if not self._online:
                await asyncio.sleep(max(timeout, 0.0))
            return None
        seen = {job_id for job_id in wanted if job_id in self._unseen_changes}
        if seen or timeout <= 0 or not wanted:
            for job_id in seen:
                del self._unseen_changes[job_id]
            return seen
        waiter = _ChangeWaiter(wanted, asyncio.get_running_loop().create_future())
        for job_id in wanted:
            self._change_waiters.setdefault(job_id, set()).add(waiter)
        try:
            try:
                return await asyncio.wait_for(waiter.future, timeout)
            except TimeoutError:
                return set()
            except asyncio.CancelledError:
                # Cancelled after a change was handed over: keep it for the next call.
                if waiter.future.done() and not waiter.future.cancelled():
                    for job_id in waiter.future.result() or ():
                        self._keep_unseen(job_id)
                raise
        finally:
            for job_id in wanted:
                waiters = self._change_waiters.get(job_id)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._change_waiters[job_id]

    def _note_change(self, job_id: str) -> None:
        waiters = self._change_waiters.get(job_id)
        delivered = False
        for waiter in waiters or ():
            if not waiter.future.done():
                waiter.future.set_result({job_id})
                delivered = True
        if not delivered:
            self._keep_unseen(job_id)

    def _keep_unseen(self, job_id: str) -> None:
        self._unseen_changes[job_id] = None
        self._unseen_changes.move_to_end(job_id)
        while len(self._unseen_changes) > _UNSEEN_CHANGES_KEPT:
            self._unseen_changes.popitem(last=False)

    def _all_changes_unknown(self) -> None:
        """Messages may have been lost: every change waiter must re-read its rows."""
        for waiters in self._change_waiters.values():
            for waiter in waiters:
                if not waiter.future.done():
                    waiter.future.set_result(None)

    def _note(self, queue: str | None) -> None:
        """A message for `queue`, or (None) a reason for every waiter to look again."""
        self.generation += 1
        if queue is None:
            self._generation_for_all = self.generation
            self._all_changes_unknown()
        else:
            self._generation_by_queue[queue] = self.generation
        for waiter in self._waiters:
            if (queue is None or waiter.wants(queue)) and not waiter.future.done():
                waiter.future.set_result(None)

    async def _run(self) -> None:
        backoff = 0.05
        reconnecting = False
        while True:
            pubsub = self._client.pubsub(ignore_subscribe_messages=False)
            try:
                channels = [self._channel] if self._changes_channel is None else [self._channel, self._changes_channel]
                await pubsub.subscribe(*channels)
                # Online once the server confirmed: a publish after that is never missed.
                await self._confirmed(pubsub, len(channels))
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
                        self._dispatch(message)
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
                    await pubsub.aclose()

    def _dispatch(self, message: dict[str, object]) -> None:
        if message.get("type") != "message":
            return
        if self._changes_channel is not None and str(message.get("channel")) == self._changes_channel:
            self._note_change(str(message["data"]))
        else:
            self._note(str(message["data"]))

    async def _confirmed(self, pubsub: PubSub, count: int) -> None:
        """Read until the server confirmed `count` subscriptions, dispatching what comes meanwhile."""
        confirmed = 0
        while confirmed < count:
            message = await pubsub.get_message(ignore_subscribe_messages=False, timeout=_IDLE_CHECK_SECONDS)
            if message is None:
                raise ConnectionError("no subscription confirmation from Redis")
            if message.get("type") == "subscribe":
                confirmed += 1
            else:
                self._dispatch(message)
