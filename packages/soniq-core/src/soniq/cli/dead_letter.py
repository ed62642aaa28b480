"""``soniq dead-letter list|replay|purge|delete|cleanup|export|stats``.

Bulk actions (``replay --all``, ``delete --all``, ``cleanup``) take the filter options,
report what they would do with ``--dry-run``, and ask for confirmation unless ``--yes``
(refusing, in a shell that cannot answer, rather than guessing).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soniq.cli.common import EXIT_OK, CLIError, build_app, refuse_to_create_default, run_with_app
from soniq.cli.output import safe
from soniq.dead_letter import EXPORT_FORMATS, DeadLetterFilter, export_text
from soniq.validation import JobOptionsError

if TYPE_CHECKING:
    from soniq.app import Soniq
    from soniq.cli.argparser import SoniqArgumentParser

BULK_ACTIONS = ("replay", "delete")


def row_line(row: dict[str, Any], *, with_traceback: bool = False) -> str:
    """One dead-letter row as one line (the error's summary line); with `with_traceback`, the rest of
    the stored error below it, indented, one escaped line per line."""
    error = str(row["last_error"] or "")
    summary, _, trace = error.partition("\n")
    # The run it ended on (see "Runs and attempts" in docs/user-guide.md); 0 counted runs: it never ran.
    runs = f"run {row['attempts']} of {row['max_attempts']}" if row["attempts"] else "never ran"
    line = (
        f"{safe(row['id'])}  {safe(row['job_name'])}  queue={safe(row['queue'])}  {runs}  "
        f"reason={safe(row['dead_letter_reason'])}  resurrections={row['resurrection_count']}  "
        f"error={safe(summary)}"
    )
    if row.get("decode_error"):
        line += f"  decode_error={safe(row['decode_error'])}"
    if with_traceback and trace.strip():
        line += "".join(f"\n    {safe(part)}" for part in trace.rstrip().split("\n"))
    return line


def _when(option: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise CLIError(
            f"{option} must be an ISO date or time such as 2026-01-31 or 2026-01-31T12:00, got {text!r}"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def filter_from(args: argparse.Namespace) -> DeadLetterFilter:
    """The filter the options name (every row when none is given)."""
    if args.limit < 1:
        raise CLIError(f"--limit must be at least 1, got {args.limit}")
    resurrected = {"yes": True, "no": False, None: None}[args.resurrected]
    try:
        return DeadLetterFilter(
            job_names=args.filter or None,
            queues=args.queue or None,
            reasons=args.reason or None,
            date_from=_when("--since", args.since),
            date_to=_when("--until", args.until),
            has_been_resurrected=resurrected,
            limit=args.limit,
        )
    except JobOptionsError as exc:
        raise CLIError(str(exc)) from None


def _confirm(question: str, args: argparse.Namespace) -> None:
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise CLIError(f"{question}: refusing without --yes in a non-interactive shell (add --yes to confirm)")
    answer = input(f"{question} [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise CLIError("cancelled; nothing was changed")


def _check(args: argparse.Namespace) -> None:
    if args.action in BULK_ACTIONS:
        if args.all and args.job_ids:
            raise CLIError(f"dead-letter {args.action}: give job ids or --all, not both")
        if not args.all and not args.job_ids:
            raise CLIError(f"dead-letter {args.action}: give one or more job ids, or --all with filter options")
    if args.action == "cleanup" and args.days < 0:
        raise CLIError(f"--days must be at least 0, got {args.days}")
    if args.action == "replay" and args.max_attempts is not None and args.max_attempts < 1:
        raise CLIError(f"--max-attempts must be at least 1, got {args.max_attempts}")


def cmd_dead_letter(args: argparse.Namespace) -> int:
    _check(args)
    wanted = filter_from(args) if hasattr(args, "filter") else None
    app = build_app(args, need_jobs=False)
    refuse_to_create_default(app, f"dead-letter {args.action}")
    result = run_with_app(app, lambda app: _run(app, args, wanted))
    if args.action == "export" and args.output is not None:
        Path(args.output).write_text(result, encoding="utf-8")
        result = f"exported to {safe(args.output)}"
    print(result.rstrip("\n"))
    return EXIT_OK


async def _run(app: Soniq, args: argparse.Namespace, wanted: DeadLetterFilter | None) -> str:
    service = app.dead_letter
    action = args.action
    if action == "list":
        assert wanted is not None
        rows = await service.list(filter=wanted)
        if args.json:
            # ensure_ascii (the default) writes control characters as \u001b: safe for a terminal.
            return json.dumps(rows, indent=2, default=str)
        if not rows:
            return "no dead-letter jobs"
        return "\n".join(row_line(row, with_traceback=args.traceback) for row in rows)
    if action == "purge":
        if not await service.purge(args.job_id):
            raise CLIError(f"no dead-letter job with id {safe(args.job_id)!r}")
        return f"purged {safe(args.job_id)}"
    if action == "stats":
        stats = await service.stats(wanted)
        if args.json:
            return json.dumps(stats, indent=2, default=str)
        lines = [f"total {stats['total']}  resurrected {stats['resurrected']}"]
        for key in ("by_queue", "by_job_name", "by_reason"):
            counts = ", ".join(f"{safe(name)}={count}" for name, count in stats[key].items()) or "-"
            lines.append(f"{key.removeprefix('by_')}: {counts}")
        return "\n".join(lines)
    if action == "export":
        assert wanted is not None
        return export_text(await service.list(filter=wanted), args.format)
    if action == "cleanup":
        count = await service.cleanup(args.days, dry_run=True)
        if args.dry_run or count == 0:
            return (
                f"{'would delete' if args.dry_run else 'deleted'} {count} dead-letter jobs older than {args.days} days"
            )
        _confirm(f"delete {count} dead-letter jobs older than {args.days} days", args)
        return f"deleted {await service.cleanup(args.days)} dead-letter jobs older than {args.days} days"
    if action == "replay":
        return await _replay(app, args, wanted)
    return await _delete(app, args, wanted)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "reset_attempts": not args.keep_attempts,
        "new_max_attempts": args.max_attempts,
        "new_priority": args.priority,
        "new_queue": args.to_queue,
    }


async def _replay(app: Soniq, args: argparse.Namespace, wanted: DeadLetterFilter | None) -> str:
    service = app.dead_letter
    if not args.all:
        if args.dry_run:
            return "\n".join(f"would replay {safe(job_id)}" for job_id in args.job_ids)
        new_ids = [await service.replay(job_id, **_overrides(args)) for job_id in args.job_ids]
        return "\n".join(safe(new_id) for new_id in new_ids)
    assert wanted is not None
    rows = await service.list(filter=wanted)
    if args.dry_run or not rows:
        return f"would replay {len(rows)} dead-letter jobs" if args.dry_run else "no dead-letter jobs match"
    _confirm(f"replay {len(rows)} dead-letter jobs", args)
    replayed = await service.bulk_replay(wanted, **_overrides(args))
    return f"replayed {len(replayed)} dead-letter jobs"


async def _delete(app: Soniq, args: argparse.Namespace, wanted: DeadLetterFilter | None) -> str:
    service = app.dead_letter
    if not args.all:
        if args.dry_run:
            return "\n".join(f"would delete {safe(job_id)}" for job_id in args.job_ids)
        missing = [job_id for job_id in args.job_ids if not await service.delete(job_id)]
        if missing:
            raise CLIError(f"no dead-letter job with id {', '.join(repr(safe(job_id)) for job_id in missing)}")
        return f"deleted {len(args.job_ids)} dead-letter jobs"
    assert wanted is not None
    count = min((await service.stats(wanted))["total"], wanted.limit)
    if args.dry_run or count == 0:
        return f"would delete {count} dead-letter jobs" if args.dry_run else "no dead-letter jobs match"
    _confirm(f"delete {count} dead-letter jobs", args)
    return f"deleted {await service.bulk_delete(wanted)} dead-letter jobs"


def _filter_options(parser: argparse.ArgumentParser, *, default_limit: int) -> None:
    group = parser.add_argument_group("filter")
    group.add_argument("--filter", action="append", metavar="JOB_NAME", help="only this job name (repeatable)")
    group.add_argument("--queue", action="append", metavar="QUEUE", help="only this queue (repeatable)")
    group.add_argument("--reason", action="append", metavar="REASON", help="only this dead-letter reason (repeatable)")
    group.add_argument("--since", metavar="WHEN", help="moved to the dead-letter table at or after (ISO date/time)")
    group.add_argument("--until", metavar="WHEN", help="moved at or before (ISO date/time)")
    group.add_argument(
        "--resurrected", choices=("yes", "no"), default=None, help="only rows replayed before (yes) or never (no)"
    )
    group.add_argument(
        "--limit",
        type=int,
        default=default_limit,
        metavar="N",
        help=f"at most this many rows (default {default_limit})",
    )


def _bulk_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="say what would happen; change nothing")
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")


def register(sub: argparse._SubParsersAction[SoniqArgumentParser], common: SoniqArgumentParser) -> None:
    p = sub.add_parser("dead-letter", parents=[common], help="list, replay, delete, clean up or export dead letters")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = actions.add_parser("list", parents=[common], help="the dead-letter rows, newest first")
    _filter_options(q, default_limit=100)
    q.add_argument("--json", action="store_true", help="print JSON instead of text")
    q.add_argument(
        "--traceback", action="store_true", help="print each row's stored traceback below its line, indented"
    )
    q.set_defaults(parser=q)
    q = actions.add_parser("replay", parents=[common], help="queue fresh copies of dead-letter jobs")
    q.add_argument("job_ids", nargs="*", metavar="JOB_ID", help="the dead-letter jobs' ids")
    q.add_argument("--all", action="store_true", help="every row the filter options match")
    _filter_options(q, default_limit=1000)
    _bulk_options(q)
    q.add_argument("--keep-attempts", action="store_true", help="the copy keeps the dead row's attempts (default 0)")
    q.add_argument("--max-attempts", type=int, default=None, metavar="N", help="the copy's max attempts")
    q.add_argument("--priority", type=int, default=None, metavar="N", help="the copy's priority")
    q.add_argument("--to-queue", default=None, metavar="QUEUE", help="the copy's queue")
    q.set_defaults(parser=q)
    q = actions.add_parser("purge", parents=[common], help="delete one dead-letter job for good")
    q.add_argument("job_id", help="the dead-letter job's id")
    q.set_defaults(parser=q)
    q = actions.add_parser("delete", parents=[common], help="delete dead-letter jobs for good")
    q.add_argument("job_ids", nargs="*", metavar="JOB_ID", help="the dead-letter jobs' ids")
    q.add_argument("--all", action="store_true", help="every row the filter options match")
    _filter_options(q, default_limit=1000)
    _bulk_options(q)
    q.set_defaults(parser=q)
    q = actions.add_parser("cleanup", parents=[common], help="delete dead-letter jobs older than --days")
    q.add_argument("--days", type=float, default=30, metavar="N", help="older than this many days (default 30)")
    _bulk_options(q)
    q.set_defaults(parser=q)
    q = actions.add_parser("export", parents=[common], help="write dead-letter rows as JSON or CSV")
    _filter_options(q, default_limit=1000)
    q.add_argument("--format", choices=EXPORT_FORMATS, default="csv", help="csv (default) or json")
    q.add_argument("--output", default=None, metavar="PATH", help="write to this file (default: standard output)")
    q.set_defaults(parser=q)
    q = actions.add_parser("stats", parents=[common], help="dead-letter counts by queue, job name and reason")
    _filter_options(q, default_limit=1000)
    q.add_argument("--json", action="store_true", help="print JSON instead of text")
    q.set_defaults(parser=q)
    p.set_defaults(func=cmd_dead_letter, parser=p)
