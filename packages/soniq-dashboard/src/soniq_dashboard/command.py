"""``soniq dashboard``: found by core's CLI through the ``soniq.commands`` entry point.

This module imports only the standard library at load time, so listing the
command costs nothing; the web stack is imported when the command runs.
"""

from __future__ import annotations

import argparse
import os
import sys

API_KEY_VARIABLE = "SONIQ_DASHBOARD_API_KEY"
READ_KEY_VARIABLE = "SONIQ_DASHBOARD_READ_KEY"
ALLOWED_HOSTS_VARIABLE = "SONIQ_DASHBOARD_ALLOWED_HOSTS"


def add_command(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Serve the dashboard. APP is module:attr naming a Soniq app; without it one is built from "
        "--database-url or SONIQ_DATABASE_URL."
    )
    # `app_positional`, as core names every command's APP, so core's `app_path` reads it (and --app).
    parser.add_argument("app_positional", nargs="?", metavar="APP", default=None)
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=6161)
    parser.add_argument("--prefix", default="", help="serve under this path, e.g. /soniq")
    parser.add_argument(
        "--writes",
        action="store_true",
        help=f"allow replay, purge and cancel; needs the API key in ${API_KEY_VARIABLE} (never on the command line)",
    )
    parser.add_argument("--poll-interval", type=float, default=2.0, help="seconds between live updates")
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name the dashboard is reached by, besides localhost, 127.0.0.1, [::1] and --host "
        f"(repeatable; also ${ALLOWED_HOSTS_VARIABLE}, comma-separated); any other Host header is refused",
    )
    parser.add_argument(
        "--read-key-env",
        default=READ_KEY_VARIABLE,
        metavar="VAR",
        help=f"the environment variable holding the read key (default: {READ_KEY_VARIABLE}); when it is set, "
        "every page needs the key",
    )
    parser.set_defaults(func=run)


add_command.help = "serve the web dashboard"  # type: ignore[attr-defined]


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from soniq import app_for_command
    from soniq.observers import redact_url
    from soniq_dashboard.access import allowed_hosts_for, is_loopback
    from soniq_dashboard.app import create_dashboard_app

    # Core's loader, as every command finds its app: APP or --app (module:attr), else the jobs modules'
    # app, else one from the URL. It puts the working directory LAST on sys.path, so a stray
    # `aiosqlite.py` there cannot stand in for the driver.
    # Like every read command: no URL and no ./soniq.db is one `soniq: error:` line, not a new empty database.
    app = app_for_command(args, "dashboard")
    # Built here, not in the server's lifespan: a backend package that is not installed is then one line
    # from core's CLI instead of uvicorn's traceback and exit 3.
    _ = app.backend
    api_key = os.environ.get(API_KEY_VARIABLE) or None
    if args.writes and not api_key:
        raise ValueError(f"--writes needs the API key in ${API_KEY_VARIABLE}")
    read_key = os.environ.get(args.read_key_env) or None
    configured = [h.strip() for h in os.environ.get(ALLOWED_HOSTS_VARIABLE, "").split(",") if h.strip()]
    allowed_hosts = allowed_hosts_for(args.host, [*configured, *args.allowed_host])
    asgi = create_dashboard_app(
        app,
        prefix=args.prefix,
        writes=args.writes,
        api_key=api_key,
        poll_interval=args.poll_interval,
        manage_app=True,
        allowed_hosts=allowed_hosts,
        read_key=read_key,
    )
    if read_key is None and not is_loopback(args.host):
        print(
            f"WARNING: soniq dashboard is bound to {args.host}, not to this machine only, and has no read key: "
            "it shows job data (arguments, results, errors) to anyone who can reach it. "
            f"Set ${args.read_key_env} to require a key, or bind 127.0.0.1.",
            file=sys.stderr,
            flush=True,
        )
    where = f"http://{args.host}:{args.port}{args.prefix}/"
    print(f"soniq dashboard for {redact_url(app.settings.resolved_database_url)} at {where}", flush=True)
    # Core's CLI sets `log_level` (DEBUG for -v); uvicorn's access log follows only a debug run.
    debug = getattr(args, "log_level", None) == "DEBUG"
    uvicorn.run(asgi, host=args.host, port=args.port, log_level="info" if debug else "warning")
    return 0
