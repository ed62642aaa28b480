"""Cancelling running jobs on request: the worker's cancel watcher.

While the worker holds rows, one task per worker waits on the store for
changes to them (`wait_for_job_changes`: pushed by a store with
`push_job_changes`, otherwise a short sleep) and then reads which of its rows
carry a cancel request (`cancel_requests`, one read by worker id). Each
request is delivered according to where its row is:

- not started (claimed with the flag set, or waiting in the prefetch buffer):
  the row ends `cancelled` at once and the handler never runs;
- an async handler running: its own task is cancelled; once it has stopped the
  run writes `cancelled` (`finish_cancel`) instead of any other outcome;
- a sync handler running: `ctx.cancel_requested` becomes true, and the run
  writes `cancelled` when the handler returns or raises;
- the handler already finished: the request lost the race; the ordinary
  outcome (`done`) is written, and the log says so.

A cancelled run keeps its attempt. The shutdown state machine is not
involved: this path never cancels a run's task (only the handler's), and a
row that shutdown already abandoned is left to its nack, which keeps the
request on the row so that the next claim ends it `cancelled` unrun.

All of this is the backend role `CancelChannel`: a worker on a backend without it runs no
watcher (nobody can request a cancel there: `app.cancel` refuses a running job).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

from soniq import features
from soniq.backend import BackendCapabilities, CancelChannel, QueueStore
from soniq.outcomes import HandlerKind
from soniq.params import CancelRequestsParams, WaitForJobChangesParams
from soniq.worker._runs import JobRun, Outcome
from soniq.worker._table import RunTable
from soniq.worker.state import RunPhase

logger = logging.getLogger("soniq.worker")

PUSH_WAIT_SECONDS = 5.0
"""With `push_job_changes` a request wakes the watcher; it also reads the requests this often anyway."""
POLL_SECONDS = 0.3
"""Without push, how often a worker holding rows reads its cancel requests: a request then reaches
a running job within this plus one write, well inside the one second the feature promises even on a
busy machine, for one indexed read by worker id per period (and none while the worker holds nothing)."""
WIDEN_DEBOUNCE_SECONDS = 0.05
"""With push, newly claimed rows join the wait at most this often (restarting a wait costs a little)."""
RETRY_SECONDS = 1.0
"""After a failed wait or read (store unreachable), the watcher tries again this much later."""

CANCELLED_AT_CLAIM = "cancelled by request before its handler started (the request was made before this claim)"
CANCELLED_IN_BUFFER = "cancelled by request before its handler started (the row was waiting in the prefetch buffer)"


class WatchedStore(CancelChannel, Protocol):
    """What the watcher uses: the backend's `CancelChannel` and its capabilities."""

    @property
    def capabilities(self) -> BackendCapabilities: ...


def watched_store(backend: QueueStore) -> WatchedStore:
    """`backend` as the watcher uses it, or `MissingBackendRoleError` without `CancelChannel`."""
    features.cancel_channel(backend)
    return cast(WatchedStore, backend)  # checked just above; the capabilities are every backend's


class Delivery(enum.Enum):
    REACHED = "reached"
    """The run ends `cancelled` (its handler is stopped or told, or never starts)."""
    TOO_LATE = "too_late"
    """The handler had already finished: its outcome is written as usual."""
    SHUTDOWN = "shutdown"
    """Shutdown gave the row up first; its nack keeps the request for the next claim."""


def deliver(run: JobRun) -> Delivery:
    """Hand a cancel request to a run holding a slot (or writing its outcome)."""
    if run.abandoned:
        return Delivery.SHUTDOWN
    phase = run.phase
    if phase in (RunPhase.CLAIMED, RunPhase.WAITING_PERMIT):
        run.reach_with_cancel()  # the executor checks it before calling the handler
        return Delivery.REACHED
    if phase is RunPhase.RUNNING_ASYNC:
        task = run.handler_task
        if task is not None and task.done():
            return Delivery.TOO_LATE
        run.reach_with_cancel()
        if task is not None:
            task.cancel()
        return Delivery.REACHED
    if phase is RunPhase.RUNNING_SYNC:
        future = run.thread_future
        if future is not None and future.done():
            return Delivery.TOO_LATE
        run.reach_with_cancel()
        return Delivery.REACHED
    return Delivery.TOO_LATE


def cancel_message(run: JobRun, outcome: Outcome) -> str:
    """The `last_error` of a run a cancel request ended: who cancelled, and how the handler ended."""
    if outcome.cancelled:
        return "cancelled by request before its handler started"
    if outcome.timed_out:
        return "cancelled by request; the handler did not stop and then overran its timeout"
    if run.kind is HandlerKind.ASYNC:
        if isinstance(outcome.error, asyncio.CancelledError):
            return "cancelled by request: the async handler was cancelled"
        return f"cancelled by request: the async handler was cancelled and then {_ending(outcome)}"
    return f"cancelled by request: the sync handler {_ending(outcome)} after ctx.cancel_requested became true"


def _ending(outcome: Outcome) -> str:
    if outcome.ok or outcome.error is None:
        return "returned"
    return f"raised {type(outcome.error).__name__}"


class CancelWatcher:
    """One per worker: finds the cancel requests on the rows it holds and delivers them.

    `cancel_unstarted(run, message)` ends a row whose handler never started (the dispatcher's).
    """

    def __init__(
        self,
        backend: WatchedStore,
        worker_id: str,
        runs: RunTable,
        cancel_unstarted: Callable[[JobRun, str], None],
    ) -> None:
        self._backend = backend
        self._worker_id = worker_id
        self._runs = runs
        self._cancel_unstarted = cancel_unstarted
        self._push = backend.capabilities.push_job_changes
        self._period = PUSH_WAIT_SECONDS if self._push else POLL_SECONDS
        self._last_read = time.monotonic()

    async def watch(self) -> None:
        """Run until cancelled (with the worker's other background loops, after its shutdown).

        A wait is never cancelled while the worker holds rows: a store may already have handed
        it a change, which a cancel would throw away. When more rows arrive, a wider wait starts
        beside it and the narrower one runs out its timeout (or wakes) on its own."""
        runs = self._runs
        pending: set[asyncio.Future[set[str] | None]] = set()
        widest: frozenset[str] = frozenset()
        try:
            while True:
                runs.added.clear()
                ids = runs.job_ids()
                if not ids:
                    for waiting in pending:
                        waiting.cancel()  # no row held, so no request can concern this worker
                    pending.clear()
                    await runs.added.wait()
                    self._last_read = time.monotonic()
                    continue
                held = frozenset(ids)
                if not pending or not held <= widest:
                    widest = held
                    params = WaitForJobChangesParams(job_ids=ids, timeout=self._period)
                    pending.add(asyncio.ensure_future(self._backend.wait_for_job_changes(params)))
                began = time.monotonic()
                widen = asyncio.ensure_future(self._rows_added()) if self._push else None
                waiters: list[asyncio.Future[Any]] = [*pending]
                if widen is not None:
                    waiters.append(widen)
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if widen is not None:
                        widen.cancel()
                finished = {waiting for waiting in pending if waiting.done()}
                pending -= finished
                if not pending:
                    widest = frozenset()
                wanted = any([await self._wants_read(waiting, held) for waiting in finished])
                # A worker that claims without pause keeps widening: it reads on its period here too.
                if wanted or time.monotonic() - self._last_read >= self._period:
                    await self.read_requests()
                elif finished and time.monotonic() - began < 0.001:
                    await asyncio.sleep(0.01)  # a store that returns at once with nothing must not spin this loop
        finally:
            for waiting in pending:
                waiting.cancel()

    async def _rows_added(self) -> None:
        await asyncio.sleep(WIDEN_DEBOUNCE_SECONDS)
        await self._runs.added.wait()

    async def _wants_read(self, finished: asyncio.Future[set[str] | None], held: frozenset[str]) -> bool:
        """Whether a finished wait calls for a read: a change among the held rows, or one it cannot name."""
        try:
            changed = finished.result()
        except asyncio.CancelledError:
            return False
        except Exception as exc:
            logger.warning("waiting for cancel requests failed: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(RETRY_SECONDS)
            return True
        return changed is None or bool(changed & held)

    async def read_requests(self) -> None:
        """Read this worker's cancel requests once and deliver each one not yet delivered."""
        self._last_read = time.monotonic()
        try:
            requested = await self._backend.cancel_requests(CancelRequestsParams(worker_id=self._worker_id))
        except Exception as exc:
            logger.warning("reading cancel requests failed: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(RETRY_SECONDS)
            return
        for job_id in sorted(requested):
            self._deliver(job_id)

    def _deliver(self, job_id: str) -> None:
        runs = self._runs
        run = runs.get(job_id)
        if run is None:
            buffered = runs.buffered_run(job_id)
            if buffered is not None and not buffered.cancel_noted and runs.unbuffer(buffered):
                buffered.cancel_noted = True
                logger.info("job %s (%s): cancel requested while prefetched", job_id, buffered.job.job_name)
                self._cancel_unstarted(buffered, CANCELLED_IN_BUFFER)
            return
        if run.cancel_noted:
            return
        run.cancel_noted = True
        delivery = deliver(run)
        name = run.job.job_name
        if delivery is Delivery.REACHED:
            logger.info("job %s (%s): cancel requested; stopping its run (phase %s)", job_id, name, run.phase.value)
        elif delivery is Delivery.TOO_LATE:
            logger.info(
                "job %s (%s): cancel requested after its handler had finished; the cancel lost the race and "
                "the run's own outcome is written",
                job_id,
                name,
            )
        else:
            logger.info(
                "job %s (%s): cancel requested after shutdown gave the row up; the nack keeps the request, "
                "and the next claim ends it cancelled",
                job_id,
                name,
            )
