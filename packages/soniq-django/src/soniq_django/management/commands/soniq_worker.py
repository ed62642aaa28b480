from __future__ import annotations

import asyncio
import logging
import signal
import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from soniq import Soniq
from soniq_django.config import default_alias
from soniq_django.runtime import build_worker_app

logger = logging.getLogger("soniq")

CLOSE_TIMEOUT_SECONDS = 10.0


class Command(BaseCommand):
    help = (
        "Run a Soniq worker for this project's Django tasks (the same worker and shutdown state machine as "
        "`soniq worker`): the first SIGTERM or SIGINT drains, a second one forces the timeout path."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--backend", help="the TASKS alias to serve (default: the Soniq one)")
        parser.add_argument("--concurrency", type=int, help="in-flight jobs (Soniq setting concurrency)")
        parser.add_argument("--queues", help="comma-separated queues to serve (default: all)")
        parser.add_argument("--run-once", action="store_true", help="stop once no job is due")

    def handle(self, *args: Any, **options: Any) -> None:
        if not logger.handlers and not logging.getLogger().handlers:
            # Django configures only its own loggers; without this the worker's shutdown log is silent.
            logging.basicConfig(
                level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
            )
        alias = options["backend"] or default_alias()
        overrides: dict[str, Any] = {}
        if options["concurrency"] is not None:
            overrides["concurrency"] = options["concurrency"]
        queues = [q.strip() for q in (options["queues"] or "").split(",") if q.strip()] or None
        try:
            app = build_worker_app(alias, overrides=overrides)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        logger.info("soniq_worker serving %d task(s) of TASKS[%r]: %s", len(app.registry), alias, app)
        summary = asyncio.run(self._run(app, queues, run_once=options["run_once"]))
        logger.info(
            "worker %s stopped: %s, %d rows handled, %d nack'd",
            summary.worker_id,
            " -> ".join(state.value for state in summary.states),
            summary.processed,
            len(summary.nacked_job_ids),
        )

    async def _run(self, app: Soniq, queues: list[str] | None, *, run_once: bool) -> Any:
        try:
            summary = await app.run_worker(queues=queues, run_once=run_once)
            # STOPPED: a late signal while the app closes must not turn a clean exit into a kill.
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_IGN)
            return summary
        finally:
            try:
                await asyncio.wait_for(app.close(), CLOSE_TIMEOUT_SECONDS)
            except TimeoutError:
                logger.warning("closing the backend took over %gs; exiting without waiting", CLOSE_TIMEOUT_SECONDS)
