"""``soniq queue pause|resume|list``: queues paused and resumed fleet-wide.

A paused queue still takes enqueues; no worker claims from it from its next wake-up on (at most
`poll_interval` later). Pausing a paused queue, or resuming one that is not paused, says so and
exits 0: the queue is in the state asked for. Pausing a paused queue keeps its reason, unless
``--reason`` gives a new one.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from soniq.cli.common import EXIT_OK, CLIError, build_app, refuse_to_create_default, run_with_app
from soniq.cli.output import safe
from soniq.queue_pause import check_pause_reason
from soniq.validation import JobOptionsError, check_queue_name

if TYPE_CHECKING:
    from soniq.app import Soniq
    from soniq.cli.argparser import SoniqArgumentParser

__all__ = ["paused_line", "register"]


def paused_line(row: dict[str, Any]) -> str:
    """One paused queue as one line: its name, since when, and its reason."""
    reason = row.get("reason")
    since = row["paused_at"].isoformat(timespec="seconds") if row.get("paused_at") is not None else "?"
    text = f"{safe(row['queue'])}  paused since {since}"
    return f"{text}  reason: {safe(reason)}" if reason else text


def _check(args: argparse.Namespace) -> None:
    """Refuse a bad name or reason before opening the app."""
    try:
        if args.action in ("pause", "resume"):
            check_queue_name(args.name)
        if args.action == "pause":
            check_pause_reason(args.reason)
    except JobOptionsError as exc:
        raise CLIError(str(exc)) from None


def cmd_queue(args: argparse.Namespace) -> int:
    _check(args)
    app = build_app(args, need_jobs=False)
    refuse_to_create_default(app, f"queue {args.action}")
    print(run_with_app(app, lambda app: _run(app, args)))
    return EXIT_OK


async def _run(app: Soniq, args: argparse.Namespace) -> str:
    if args.action == "pause":
        name = safe(args.name)
        if args.reason is None and any(row["queue"] == args.name for row in await app.paused_queues()):
            # A pause replaces the stored reason: without --reason, leave a paused queue's reason alone.
            return f"queue {name} was already paused"
        if await app.pause_queue(args.name, reason=args.reason):
            return f"paused queue {name}"
        note = "; its reason is updated" if args.reason is not None else ""
        return f"queue {name} was already paused{note}"
    if args.action == "resume":
        name = safe(args.name)
        if await app.resume_queue(args.name):
            return f"resumed queue {name}"
        return f"queue {name} was not paused"
    rows = await app.paused_queues()
    if args.json:
        # ensure_ascii (the default) writes control characters as \u001b: safe for a terminal.
        return json.dumps(rows, indent=2, default=str)
    if not rows:
        return "no paused queues"
    return "\n".join(paused_line(row) for row in rows)


def register(sub: argparse._SubParsersAction[SoniqArgumentParser], common: SoniqArgumentParser) -> None:
    p = sub.add_parser("queue", parents=[common], help="pause, resume or list paused queues")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = actions.add_parser("pause", parents=[common], help="stop every worker claiming from a queue")
    q.add_argument("name", metavar="NAME", help="the queue")
    q.add_argument("--reason", default=None, metavar="TEXT", help="why, shown to operators")
    q.set_defaults(parser=q)
    q = actions.add_parser("resume", parents=[common], help="let workers claim from a paused queue again")
    q.add_argument("name", metavar="NAME", help="the queue")
    q.set_defaults(parser=q)
    q = actions.add_parser("list", parents=[common], help="the paused queues, with reason and since when")
    q.add_argument("--json", action="store_true", help="print JSON instead of text")
    q.set_defaults(parser=q)
    p.set_defaults(func=cmd_queue, parser=p)
