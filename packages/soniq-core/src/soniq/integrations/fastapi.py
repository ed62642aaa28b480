"""A lifespan for FastAPI or Starlette that opens the app and, if asked, runs a worker beside it.

    from soniq.integrations.fastapi import lifespan
    api = FastAPI(lifespan=lifespan(app, run_worker=True, concurrency=2))

Nothing here imports FastAPI or Starlette: the lifespan is a plain async context manager
factory, which both frameworks accept.

Logging: uvicorn configures its own loggers only, so under it Soniq's INFO lines (the worker's
start, each finished job) would be dropped and its warnings printed by Python's last-resort
handler without level or logger name. When nothing handles the ``soniq`` loggers (no handler on
them or on the root logger) as the lifespan starts, it gives them one: INFO and up, to stderr,
``LEVEL:     logger.name: message`` as uvicorn writes its own. Configure logging yourself (a
handler on the root logger, or ``uvicorn --log-config``; docs/observability.md) and it adds nothing.
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


class UvicornStyleFormatter(logging.Formatter):
    """``INFO:     soniq.worker: message``: uvicorn's level prefix, then the logger's name."""

    def __init__(self) -> None:
        super().__init__("%(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname + ':':<9} {super().format(record)}"


def ensure_soniq_logging() -> logging.Handler | None:
    """Give the ``soniq`` loggers a stderr handler at INFO when nothing would handle them; return it (None
    when logging is already configured). Called by the lifespan; an application that sets up logging
    itself (before the lifespan runs) never gets this handler."""
    soniq_logger = logging.getLogger("soniq")
    if soniq_logger.hasHandlers():
        return None
    handler = logging.StreamHandler()
    handler.setFormatter(UvicornStyleFormatter())
    soniq_logger.addHandler(handler)
    if soniq_logger.level == logging.NOTSET:
        soniq_logger.setLevel(logging.INFO)
    return handler


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
        ensure_soniq_logging()
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
