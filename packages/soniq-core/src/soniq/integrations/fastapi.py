"""A lifespan for FastAPI or Starlette that opens the app and, if asked, runs a worker beside it.

    from soniq.integrations.fastapi import lifespan
    api = FastAPI(lifespan=lifespan(app, run_worker=True, concurrency=2))

Nothing here imports FastAPI or Starlette: the lifespan is a plain async context manager
factory, which both frameworks accept.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

from soniq.app import Soniq

logger = logging.getLogger("soniq.integrations.fastapi")

Lifespan = Callable[[Any], AbstractAsyncContextManager[None]]


def lifespan(
    soniq: Soniq,
    *,
    run_worker: bool = False,
    concurrency: int | None = None,
    queues: Sequence[str] | None = None,
    setup: bool = False,
    extra: Lifespan | None = None,
) -> Lifespan:
    """The lifespan: connect (and with `setup` create the schema), optionally start a worker task.

    At shutdown the worker is drained through the normal shutdown path (a `shutdown_event`,
    no signal handlers: the server owns SIGTERM), then the app is closed. Every server
    process runs its own worker, so ``--workers 4`` means four workers. `extra` is your own
    lifespan, entered after Soniq is ready and left before the worker stops.
    """

    @asynccontextmanager
    async def _lifespan(web_app: Any) -> AsyncIterator[None]:
        if setup:
            await soniq.setup()
        else:
            await soniq.connect()
        stop = asyncio.Event()
        worker: asyncio.Task[Any] | None = None
        try:
            if run_worker:
                logger.info(
                    "starting an in-process Soniq worker in pid %d (each server process starts its own)", os.getpid()
                )
                worker = asyncio.create_task(
                    soniq.run_worker(concurrency=concurrency, queues=queues, shutdown_event=stop),
                    name="soniq-lifespan-worker",
                )
                worker.add_done_callback(_report_exit)
            async with AsyncExitStack() as stack:
                if extra is not None:
                    await stack.enter_async_context(extra(web_app))
                yield
        finally:
            try:
                if worker is not None:
                    stop.set()
                    await asyncio.gather(worker, return_exceptions=True)
            finally:
                await soniq.close()

    return _lifespan


def _report_exit(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("the in-process Soniq worker stopped with an error", exc_info=task.exception())
