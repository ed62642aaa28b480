"""`run_worker(shutdown_event=...)`: an event instead of a signal starts the worker's shutdown."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from soniq.worker.summary import WorkerSummary
    from soniq.worker.worker import Worker

SHUTDOWN_EVENT_TRIGGER = "shutdown_event"


async def run_until_event(worker: Worker, event: asyncio.Event) -> WorkerSummary:
    """Run `worker`; when `event` is set, `stop()` it as a first SIGTERM would (DRAINING first).

    The worker's shutdown state machine does the rest: in-flight jobs get `shutdown_timeout`,
    then the async ones are nacked and sync ones waited for, as the shutdown contract says.
    """

    async def watch() -> None:
        await event.wait()
        worker.stop(SHUTDOWN_EVENT_TRIGGER)

    watcher = asyncio.create_task(watch(), name="soniq-shutdown-event")
    try:
        return await worker.run()
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
