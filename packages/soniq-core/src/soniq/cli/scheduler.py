"""``soniq scheduler [APP | MODULES]``: the scheduler loop and the leader duties alone, without claiming jobs."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import uuid
from typing import TYPE_CHECKING

from soniq.cli.common import EXIT_OK, build_app, run_with_app
from soniq.worker.startup import install_signal_handlers

if TYPE_CHECKING:
    from soniq.app import Soniq
    from soniq.cli.argparser import SoniqArgumentParser

logger = logging.getLogger("soniq.scheduler")


def cmd_scheduler(args: argparse.Namespace) -> int:
    target: str | None = args.target
    if target and ":" in target:
        args.app_positional = target  # module:attr, as every command takes it
    elif target and not args.jobs_modules:
        args.jobs_modules = target
    app = build_app(args, need_jobs=False)

    async def body(app: Soniq) -> None:
        from soniq.scheduling.duties import FleetDuties

        await app.connect()
        holder = f"scheduler-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        stopping = asyncio.Event()

        def stop(trigger: str) -> None:
            if not stopping.is_set():
                logger.info("%s: %s received, stopping", holder, trigger)
            stopping.set()

        removers = install_signal_handlers(stop)
        duties = FleetDuties(app.context, holder=holder, scheduler=True)
        logger.info(
            "%s started: polling every %gs, %d declared schedule(s)",
            holder,
            app.settings.scheduler_poll_interval,
            len(app.scheduler.declared),
        )
        try:
            await duties.run(stopping)
        finally:
            for remove in removers:
                remove()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_IGN)

    run_with_app(app, body)
    return EXIT_OK


def register(sub: argparse._SubParsersAction[SoniqArgumentParser], common: SoniqArgumentParser) -> None:
    p = sub.add_parser(
        "scheduler",
        parents=[common],
        help="run only the scheduler loop and the leader's duties (pruning) until SIGTERM/SIGINT",
    )
    p.add_argument(
        "target",
        nargs="?",
        default=None,
        metavar="APP|MODULES",
        help="the app as module:attr (same as --app), or jobs modules declaring @app.periodic schedules "
        "(same as --jobs-modules)",
    )
    p.set_defaults(func=cmd_scheduler, parser=p)
