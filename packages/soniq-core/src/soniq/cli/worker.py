"""``soniq setup`` and ``soniq worker``."""

from __future__ import annotations

import argparse
import logging
import signal
from typing import TYPE_CHECKING, Any

from soniq.cli.common import EXIT_ERROR, EXIT_OK, CLIError, build_app, run_with_app, split_names
from soniq.cli.migrations import add_setup_flags, cmd_setup
from soniq.speedups import worker_loop_factory

if TYPE_CHECKING:
    from soniq.app import Soniq
    from soniq.cli.argparser import SoniqArgumentParser


def cmd_worker(args: argparse.Namespace) -> int:
    app = build_app(args, need_jobs=True)
    queues = split_names(args.queues)
    overrides: dict[str, Any] = {}
    if args.concurrency is not None:
        overrides["concurrency"] = args.concurrency
    if args.allow_no_jobs:
        overrides["allow_no_jobs"] = True
    if args.metrics_port is not None:
        overrides["metrics_port"] = args.metrics_port
    if args.metrics_host is not None:
        overrides["metrics_host"] = args.metrics_host
    if args.no_scheduler:
        overrides["scheduler_enabled"] = False
    if args.log_jobs is not None:
        overrides["log_jobs"] = args.log_jobs
    if overrides:
        app.settings = app.settings.with_overrides(**overrides)
    if not len(app.registry) and not getattr(app.settings, "allow_no_jobs", False):
        raise CLIError(
            "no jobs are registered, so this worker could run nothing; pass --jobs-modules myapp.jobs "
            "(or set SONIQ_JOBS_MODULES), or --allow-no-jobs to start it anyway"
        )

    async def body(app: Soniq) -> Any:
        summary = await app.run_worker(concurrency=args.concurrency, queues=queues, run_once=args.run_once)
        # The worker is STOPPED: a late SIGTERM/SIGINT while the app closes must not turn exit 0 into a kill.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        return summary

    # Issue 18: uvloop when installed (setting event_loop: auto, uvloop or asyncio).
    summary = run_with_app(app, body, loop_factory=worker_loop_factory(app.settings.event_loop))
    over_limit = len(summary.nack_limit_job_ids)
    logging.getLogger("soniq").info(
        "worker %s stopped: %s, %d rows handled, %d nack'd%s",
        summary.worker_id,
        " -> ".join(s.value for s in summary.states),
        summary.processed,
        len(summary.nacked_job_ids),
        f", {over_limit} dead-lettered at the shutdown nack limit" if over_limit else "",
    )
    if summary.failed_loop is not None:
        # A loop that kept failing stopped this worker; a supervisor must see it as a failure.
        logging.getLogger("soniq").error(
            "worker %s exits with status %d: its internal loop %s kept failing (setting loop_failure_limit)",
            summary.worker_id,
            EXIT_ERROR,
            summary.failed_loop,
        )
        return EXIT_ERROR
    return EXIT_OK


def register(sub: argparse._SubParsersAction[SoniqArgumentParser], common: SoniqArgumentParser) -> None:
    p = sub.add_parser("setup", parents=[common], help="create or upgrade the schema (soniq 0.1.0's included)")
    add_setup_flags(p)
    p.set_defaults(func=cmd_setup, parser=p)

    p = sub.add_parser("worker", parents=[common], help="run a worker until SIGTERM/SIGINT")
    p.add_argument("--concurrency", type=int, default=None, metavar="N", help="jobs run at once (setting concurrency)")
    p.add_argument("--queues", default=None, metavar="Q1,Q2", help="comma-separated queues to serve (default: all)")
    p.add_argument("--run-once", action="store_true", help="stop once no job is due")
    p.add_argument(
        "--allow-no-jobs",
        action="store_true",
        help="start even when no job is registered (setting allow_no_jobs); such a worker claims nothing",
    )
    jobs_lines = p.add_mutually_exclusive_group()
    jobs_lines.add_argument(
        "--quiet-jobs",
        dest="log_jobs",
        action="store_false",
        default=None,
        help="no INFO line per finished job on the soniq.jobs logger (setting log_jobs, SONIQ_LOG_JOBS)",
    )
    jobs_lines.add_argument(  # the default now; kept so that existing command lines keep working
        "--log-jobs", dest="log_jobs", action="store_true", default=None, help=argparse.SUPPRESS
    )
    p.add_argument(
        "--metrics-port",
        default=None,
        metavar="PORT",
        help="serve /metrics on this port (setting metrics_port; needs an exporter such as soniq-prometheus)",
    )
    p.add_argument(
        "--metrics-host",
        default=None,
        metavar="ADDR",
        help="the address /metrics listens on (setting metrics_host; default 127.0.0.1, 0.0.0.0 for every interface)",
    )
    p.add_argument(
        "--no-scheduler",
        action="store_true",
        help="do not run the scheduler loop in this worker (setting scheduler_enabled); it still takes its "
        "turn as leader",
    )
    p.set_defaults(func=cmd_worker, parser=p)
