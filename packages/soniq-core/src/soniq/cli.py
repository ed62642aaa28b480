"""The ``soniq`` command line.

Every command takes ``--database-url`` (else ``SONIQ_DATABASE_URL``, else the
embedded SQLite default). Expected failures print one line on stderr and exit
1; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from soniq.app import Soniq
from soniq.commands import COMMANDS_GROUP, CommandLoadError, add_plugin_commands
from soniq.discovery import BACKENDS_GROUP, OBSERVERS_GROUP, plugins
from soniq.errors import SoniqError

EXIT_OK = 0
EXIT_ERROR = 1


class CLIError(Exception):
    """A failure to report as one line."""


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***``, for printing."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _split(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [part.strip() for part in value.split(",") if part.strip()]


def import_jobs_modules(modules: Sequence[str]) -> None:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except SoniqError:
            raise
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            detail = f"{type(exc).__name__}: {exc}"
            raise CLIError(f"could not import jobs module {name!r}: {detail}") from None


def find_app(modules: Sequence[str]) -> Soniq | None:
    """The Soniq instance the modules' jobs are registered on (or that they define)."""
    candidates: list[Soniq] = []
    for name in modules:
        module = sys.modules.get(name)
        for value in vars(module).values() if module else ():
            if isinstance(value, Soniq) and value not in candidates:
                candidates.append(value)
    for app in Soniq.instances():
        if app not in candidates and any(m in app.registry.modules() for m in modules):
            candidates.append(app)
    with_jobs = [app for app in candidates if len(app.registry)] or candidates
    if len(with_jobs) > 1:
        listing = ", ".join(repr(app) for app in with_jobs)
        raise CLIError(f"the jobs modules define several Soniq apps ({listing}); keep one per worker")
    return with_jobs[0] if with_jobs else None


def build_app(args: argparse.Namespace, *, need_jobs: bool) -> Soniq:
    modules = _split(args.jobs_modules) if getattr(args, "jobs_modules", None) else None
    if modules is None:
        modules = _split(os.environ.get("SONIQ_JOBS_MODULES")) or []
    app: Soniq | None = None
    if modules:
        import_jobs_modules(modules)
        app = find_app(modules)
    if app is None:
        if need_jobs and modules:
            raise CLIError(f"no Soniq app with jobs found in {', '.join(modules)}")
        overrides: dict[str, Any] = {}
        if args.database_url:
            overrides["database_url"] = args.database_url
        return Soniq(**overrides)
    if args.database_url and args.database_url != app.settings.database_url:
        app.use_database_url(args.database_url)
    return app


CLOSE_TIMEOUT_SECONDS = 10.0


async def _with_app(app: Soniq, body: Any) -> Any:
    try:
        return await body(app)
    finally:
        try:
            await asyncio.wait_for(app.close(), CLOSE_TIMEOUT_SECONDS)
        except TimeoutError:
            logging.getLogger("soniq").warning(
                "closing the backend took over %gs; exiting without waiting for it", CLOSE_TIMEOUT_SECONDS
            )


def cmd_setup(args: argparse.Namespace) -> int:
    app = build_app(args, need_jobs=False)

    async def body(app: Soniq) -> None:
        await app.setup()

    asyncio.run(_with_app(app, body))
    print(f"schema ready at {redact_url(app.settings.resolved_database_url)}")
    return EXIT_OK


def cmd_worker(args: argparse.Namespace) -> int:
    app = build_app(args, need_jobs=True)
    concurrency = args.concurrency if args.concurrency is not None else None
    queues = _split(args.queues)
    if concurrency is not None:
        app.settings = app.settings.with_overrides(concurrency=concurrency)
    if args.metrics_port is not None:
        app.settings = app.settings.with_overrides(metrics_port=args.metrics_port)

    async def body(app: Soniq) -> Any:
        summary = await app.run_worker(concurrency=concurrency, queues=queues, run_once=args.run_once)
        # The worker is STOPPED: a late SIGTERM/SIGINT while the app closes must not turn exit 0 into a kill.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        return summary

    summary = asyncio.run(_with_app(app, body))
    logging.getLogger("soniq").info(
        "worker %s stopped: %s, %d rows handled, %d nack'd",
        summary.worker_id,
        " -> ".join(s.value for s in summary.states),
        summary.processed,
        len(summary.nacked_job_ids),
    )
    return EXIT_OK


def cmd_enqueue(args: argparse.Namespace) -> int:
    app = build_app(args, need_jobs=False)
    try:
        kwargs = json.loads(args.args) if args.args else {}
    except json.JSONDecodeError as exc:
        raise CLIError(f"--args is not valid JSON: {exc}") from None
    if not isinstance(kwargs, dict):
        raise CLIError("--args must be a JSON object of keyword arguments")

    async def body(app: Soniq) -> str:
        return await app.enqueue(args.name, args=kwargs, queue=args.queue, scheduled_at=args.delay)

    print(asyncio.run(_with_app(app, body)))
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    app = build_app(args, need_jobs=False)

    async def body(app: Soniq) -> tuple[dict[str, int], list[Any]]:
        backend = await app.connected_backend()
        return await app.get_queue_stats(queue=args.queue), await backend.list_workers()

    stats, workers = asyncio.run(_with_app(app, body))
    if args.json:
        payload = {
            "stats": stats,
            "workers": [
                {
                    "id": w.id,
                    "hostname": w.hostname,
                    "pid": w.pid,
                    "status": w.status.value,
                    "queues": list(w.queues) if w.queues else None,
                    "concurrency": w.concurrency,
                    "last_heartbeat": w.last_heartbeat.isoformat(),
                    "started_at": w.started_at.isoformat(),
                }
                for w in workers
            ],
        }
        print(json.dumps(payload, indent=2))
        return EXIT_OK
    for key, value in stats.items():
        print(f"{key:>12}  {value}")
    live = [w for w in workers if w.status.value != "stopped"]
    print(f"{'workers':>12}  {len(live)} running, {len(workers) - len(live)} stopped")
    for w in live:
        print(f"{'':>12}  {w.id} {w.status.value} last heartbeat {w.last_heartbeat.isoformat()}")
    return EXIT_OK


def cmd_dead_letter(args: argparse.Namespace) -> int:
    app = build_app(args, need_jobs=False)

    async def body(app: Soniq) -> Any:
        if args.action == "list":
            return await app.dead_letter.list(queue=args.queue, limit=args.limit)
        if args.action == "replay":
            return await app.dead_letter.replay(args.job_id)
        return await app.dead_letter.purge(args.job_id)

    result = asyncio.run(_with_app(app, body))
    if args.action == "list":
        if args.json:
            print(json.dumps(result, indent=2, default=str))
        for row in [] if args.json else result:
            print(
                f"{row['id']}  {row['job_name']}  queue={row['queue']}  attempts={row['attempts']}  "
                f"reason={row['dead_letter_reason']}  resurrections={row['resurrection_count']}  "
                f"error={row['last_error']}"
            )
        if not result and not args.json:
            print("no dead-letter jobs")
    elif args.action == "replay":
        print(result)
    else:
        if not result:
            raise CLIError(f"no dead-letter job with id {args.job_id!r}")
        print(f"purged {args.job_id}")
    return EXIT_OK


def cmd_recover(args: argparse.Namespace) -> int:
    app = build_app(args, need_jobs=False)

    async def body(app: Soniq) -> Any:
        return await app.recover()

    result = asyncio.run(_with_app(app, body))
    if result.skipped:
        print("another process is sweeping right now; nothing done")
        return EXIT_OK
    print(
        f"stale workers: {', '.join(result.stale_workers) or 'none'}; requeued {len(result.requeued)} rows, "
        f"dead-lettered {len(result.dead_lettered)}"
    )
    return EXIT_OK


def cmd_backends(args: argparse.Namespace) -> int:
    for group, title in ((BACKENDS_GROUP, "backends"), (OBSERVERS_GROUP, "observers"), (COMMANDS_GROUP, "commands")):
        found = plugins(group)
        print(f"{title} ({group}):")
        if not found:
            print("  none installed")
        for p in found:
            print(f"  {p.name:<12} {p.value:<40} {p.distribution or '?'} {p.version or '?'}")
    return EXIT_OK


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="soniq", description="Soniq background jobs.")
    parser.add_argument("--version", action="version", version="soniq 0.2.0")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--database-url", default=None, help="backend URL (default: SONIQ_DATABASE_URL, else sqlite:///soniq.db)"
    )
    common.add_argument(
        "--jobs-modules", default=None, help="comma-separated modules to import (default: SONIQ_JOBS_MODULES)"
    )
    common.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("setup", parents=[common], help="create or upgrade the schema")
    p.set_defaults(func=cmd_setup)

    p = sub.add_parser("worker", parents=[common], help="run a worker until SIGTERM/SIGINT")
    p.add_argument("--concurrency", type=int, default=None)
    p.add_argument("--queues", default=None, help="comma-separated queues (default: all)")
    p.add_argument("--run-once", action="store_true", help="stop once no job is due")
    p.add_argument(
        "--metrics-port",
        default=None,
        help="serve /metrics on this port (needs an exporter such as soniq-prometheus; else SONIQ_METRICS_PORT)",
    )
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("enqueue", parents=[common], help="queue one job by name")
    p.add_argument("name")
    p.add_argument("--args", default=None, help="JSON object of keyword arguments")
    p.add_argument("--queue", default=None)
    p.add_argument("--delay", type=float, default=None, help="seconds from now")
    p.set_defaults(func=cmd_enqueue)

    p = sub.add_parser("status", parents=[common], help="queue counts and workers")
    p.add_argument("--json", action="store_true")
    p.add_argument("--queue", default=None)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("dead-letter", parents=[common], help="list, replay or purge dead-letter jobs")
    dl = p.add_subparsers(dest="action", required=True)
    q = dl.add_parser("list", parents=[common])
    q.add_argument("--queue", default=None)
    q.add_argument("--limit", type=int, default=100)
    q.add_argument("--json", action="store_true")
    q = dl.add_parser("replay", parents=[common])
    q.add_argument("job_id")
    q = dl.add_parser("purge", parents=[common])
    q.add_argument("job_id")
    p.set_defaults(func=cmd_dead_letter)

    p = sub.add_parser("recover", parents=[common], help="one stale-worker sweep now")
    p.set_defaults(func=cmd_recover)

    p = sub.add_parser("backends", parents=[common], help="installed backends and observers")
    p.set_defaults(func=cmd_backends)
    add_plugin_commands(sub, common, argv, taken=list(sub.choices))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser(words)
    except CommandLoadError as exc:
        print(f"soniq: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    args = parser.parse_args(words)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        code: int = args.func(args)
        return code
    except (CLIError, SoniqError, ValueError, TypeError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"soniq: error: {message}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
