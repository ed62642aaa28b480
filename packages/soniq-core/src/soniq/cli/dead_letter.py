"""``soniq dead-letter list|replay|purge``."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from soniq.cli.common import EXIT_OK, CLIError, build_app, refuse_to_create_default, run_with_app
from soniq.cli.output import safe

if TYPE_CHECKING:
    from soniq.app import Soniq
    from soniq.cli.parser import SoniqArgumentParser


def row_line(row: dict[str, Any]) -> str:
    line = (
        f"{safe(row['id'])}  {safe(row['job_name'])}  queue={safe(row['queue'])}  attempts={row['attempts']}  "
        f"reason={safe(row['dead_letter_reason'])}  resurrections={row['resurrection_count']}  "
        f"error={safe(row['last_error'])}"
    )
    if row.get("decode_error"):
        line += f"  decode_error={safe(row['decode_error'])}"
    return line


def cmd_dead_letter(args: argparse.Namespace) -> int:
    if args.action == "list" and args.limit < 1:
        raise CLIError(f"--limit must be at least 1, got {args.limit}")
    app = build_app(args, need_jobs=False)
    refuse_to_create_default(app, f"dead-letter {args.action}")

    async def body(app: Soniq) -> Any:
        if args.action == "list":
            return await app.dead_letter.list(queue=args.queue, limit=args.limit)
        if args.action == "replay":
            return await app.dead_letter.replay(args.job_id)
        return await app.dead_letter.purge(args.job_id)

    result = run_with_app(app, body)
    if args.action == "list":
        if args.json:
            # ensure_ascii (the default) writes control characters as \u001b: safe for a terminal.
            print(json.dumps(result, indent=2, default=str))
            return EXIT_OK
        for row in result:
            print(row_line(row))
        if not result:
            print("no dead-letter jobs")
    elif args.action == "replay":
        print(safe(result))
    else:
        if not result:
            raise CLIError(f"no dead-letter job with id {safe(args.job_id)!r}")
        print(f"purged {safe(args.job_id)}")
    return EXIT_OK


def register(sub: argparse._SubParsersAction[SoniqArgumentParser], common: SoniqArgumentParser) -> None:
    p = sub.add_parser("dead-letter", parents=[common], help="list, replay or purge dead-letter jobs")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = actions.add_parser("list", parents=[common], help="the dead-letter rows, newest first")
    q.add_argument("--queue", default=None, help="only this queue")
    q.add_argument("--limit", type=int, default=100, metavar="N", help="at most this many rows (default 100)")
    q.add_argument("--json", action="store_true", help="print JSON instead of text")
    q.set_defaults(parser=q)
    q = actions.add_parser("replay", parents=[common], help="queue a fresh copy of a dead-letter job")
    q.add_argument("job_id", help="the dead-letter job's id")
    q.set_defaults(parser=q)
    q = actions.add_parser("purge", parents=[common], help="delete a dead-letter job for good")
    q.add_argument("job_id", help="the dead-letter job's id")
    q.set_defaults(parser=q)
    p.set_defaults(func=cmd_dead_letter, parser=p)
