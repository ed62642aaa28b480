"""``soniq dashboard``: found by core's CLI through the ``soniq.commands`` entry point.

This module imports only the standard library at load time, so listing the
command costs nothing; the web stack is imported when the command runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

API_KEY_VARIABLE = "SONIQ_DASHBOARD_API_KEY"


def add_command(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Serve the dashboard. APP is module:attr naming a Soniq app; without it one is built from "
        "--database-url or SONIQ_DATABASE_URL."
    )
    parser.add_argument("app_path", nargs="?", metavar="APP", default=None)
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=6161)
    parser.add_argument("--prefix", default="", help="serve under this path, e.g. /soniq")
    parser.add_argument(
        "--writes",
        action="store_true",
        help=f"allow replay, purge and cancel; needs the API key in ${API_KEY_VARIABLE} (never on the command line)",
    )
    parser.add_argument("--poll-interval", type=float, default=2.0, help="seconds between live updates")
    parser.set_defaults(func=run)


add_command.help = "serve the web dashboard"  # type: ignore[attr-defined]


def load_app(path: str) -> Any:
    from soniq import Soniq

    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"APP must look like module:attr, got {path!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"could not import {module_name!r} for APP: {exc}") from None
    value: Any = module
    for part in attr.split("."):
        value = getattr(value, part, None)
    if callable(value) and not isinstance(value, Soniq):
        value = value()
    if not isinstance(value, Soniq):
        raise ValueError(f"{path} is not a Soniq app (got {type(value).__name__})")
    return value


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from soniq import Soniq
    from soniq.cli.common import refuse_to_create_default
    from soniq.redaction import redact_url
    from soniq_dashboard.app import create_dashboard_app

    if args.app_path:
        app = load_app(args.app_path)
        if args.database_url:
            app.use_database_url(args.database_url)
    elif args.jobs_modules or os.environ.get("SONIQ_JOBS_MODULES"):
        from soniq.cli import build_app

        app = build_app(args, need_jobs=False)  # the app the jobs modules define, as `soniq worker` finds it
    else:
        app = Soniq(args.database_url) if args.database_url else Soniq()
    # Like every read command: no URL and no ./soniq.db is one `soniq: error:` line, not a new empty database.
    refuse_to_create_default(app, "dashboard")
    # Built here, not in the server's lifespan: a backend package that is not installed is then one line
    # from core's CLI instead of uvicorn's traceback and exit 3.
    _ = app.backend
    api_key = os.environ.get(API_KEY_VARIABLE) or None
    if args.writes and not api_key:
        raise ValueError(f"--writes needs the API key in ${API_KEY_VARIABLE}")
    asgi = create_dashboard_app(
        app,
        prefix=args.prefix,
        writes=args.writes,
        api_key=api_key,
        poll_interval=args.poll_interval,
        manage_app=True,
    )
    where = f"http://{args.host}:{args.port}{args.prefix}/"
    print(f"soniq dashboard for {redact_url(app.settings.resolved_database_url)} at {where}", flush=True)
    # Core's CLI sets `log_level` (DEBUG for -v); uvicorn's access log follows only a debug run.
    debug = getattr(args, "log_level", None) == "DEBUG"
    uvicorn.run(asgi, host=args.host, port=args.port, log_level="info" if debug else "warning")
    return 0
