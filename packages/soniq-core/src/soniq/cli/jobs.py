"""``soniq enqueue``, ``soniq cancel`` and ``soniq logs``."""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING, Any

from soniq.cli.common import EXIT_OK, CLIError, build_app, refuse_to_create_default, run_with_app
from soniq.cli.output import safe
from soniq.errors import JobNotFoundError
from soniq.records import CancelOutcome
from soniq.validation import lookup_id

if TYPE_CHECKING:
    from soniq.app import Soniq
    from soniq.cli.argparser import SoniqArgumentParser

# A hundred years: far beyond any real delay, and well inside what every store can hold as a timestamp.
MAX_DELAY_SECONDS = 100 * 365.25 * 86400


def parse_delay(value: float | None) -> float | None:
    if value is None:
        return None
    if not math.isfinite(value) or not 0 <= value <= MAX_DELAY_SECONDS:
        raise CLIError(
            f"--delay must be a finite number of seconds from 0 to {MAX_DELAY_SECONDS:.0f} (100 years), got {value!r}"
        )
    return value


def parse_args_json(text: str | None) -> dict[str, object]:
    if not text:
        return {}
    try:
        kwargs = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"--args is not valid JSON: {exc}") from None
    except RecursionError:
        raise CLIError("--args is nested too deeply to decode") from None
    if not isinstance(kwargs, dict):
        raise CLIError("--args must be a JSON object of keyword arguments")
    return kwargs


def cmd_enqueue(args: argparse.Namespace) -> int:
    delay = parse_delay(args.delay)
    kwargs = parse_args_json(args.args)
    app = build_app(args, need_jobs=False)

    async def body(app: Soniq) -> str:
        return await app.enqueue(args.name, args=kwargs, queue=args.queue, scheduled_at=delay)

    print(safe(run_with_app(app, body)))
    return EXIT_OK


CANCEL_TEXT = {
    CancelOutcome.CANCELLED: "cancelled (it was queued)",
    CancelOutcome.REQUESTED: "cancel requested: it is running, and its worker stops it; the row ends cancelled",
    CancelOutcome.ALREADY_FINISHED: "already finished; nothing to cancel",
}
FINISHED_TEXT = {
    "cancelled": "already cancelled; nothing to do",
    "done": "already finished (done); nothing to cancel",
    "dead_letter": "already finished (in the dead-letter table); nothing to cancel",
}
"""What ``soniq cancel`` says of a job that had finished, by how it ended."""


def cmd_cancel(args: argparse.Namespace) -> int:
    app = build_app(args, need_jobs=False)
    refuse_to_create_default(app, "cancel")

    async def body(app: Soniq) -> tuple[CancelOutcome, str | None]:
        from soniq.app import request_cancel

        # The store answers directly (not `app.cancel`, which also logs it): the line below is the one report.
        key = lookup_id(args.job_id)  # an id no store can hold (NUL, a lone surrogate) is not found
        backend = await app.connected_backend()
        outcome = CancelOutcome.NOT_FOUND if key is None else await request_cancel(backend, key)
        if outcome is CancelOutcome.NOT_FOUND:  # one line, exit 1
            raise JobNotFoundError(str(args.job_id), f"cannot cancel job {args.job_id}: no job has that id")
        status = None
        if outcome is CancelOutcome.ALREADY_FINISHED:
            job = await app.get_job(args.job_id)
            status = str(job["status"]) if job is not None else None
        return outcome, status

    outcome, status = run_with_app(app, body)
    if args.json:
        print(json.dumps({"job_id": args.job_id, "outcome": outcome.value, "status": status}))
    else:
        text = FINISHED_TEXT.get(status or "", CANCEL_TEXT[outcome])
        print(f"job {safe(args.job_id)}: {text}")
    return EXIT_OK


def log_lines(record: dict[str, Any]) -> list[str]:
    """One stored `ctx.logger` record as terminal lines: time, level and message, a traceback's
    further lines indented below; every line escaped."""
    at = record["at"].isoformat(timespec="milliseconds") if record["at"] is not None else "?"
    first, *rest = str(record["message"]).split("\n") or [""]
    return [f"{at}  {safe(record['level']):<8} {safe(first)}", *(f"    {safe(line)}" for line in rest)]


def cmd_logs(args: argparse.Namespace) -> int:
    app = build_app(args, need_jobs=False)
    refuse_to_create_default(app, "logs")

    async def body(app: Soniq) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        return await app.get_job(args.job_id), await app.get_job_logs(args.job_id)

    job, records = run_with_app(app, body)
    if job is None and not records:
        raise JobNotFoundError(str(args.job_id), f"no job has the id {args.job_id}")
    if args.json:
        rows = [{**r, "at": r["at"].isoformat() if r["at"] is not None else None} for r in records]
        print(json.dumps({"job_id": args.job_id, "progress": _progress_json(job), "logs": rows}))
        return EXIT_OK
    progress = job.get("progress") if job is not None else None
    if progress is not None:
        total = f" of {progress['total']}" if progress.get("total") is not None else ""
        message = f"  {safe(progress['message'])}" if progress.get("message") else ""
        print(f"progress: {progress['done']}{total}{message}")
    if not records:
        print(f"job {safe(args.job_id)} has no stored log records")
    for record in records:
        print("\n".join(log_lines(record)))
    return EXIT_OK


def _progress_json(job: dict[str, Any] | None) -> dict[str, Any] | None:
    progress = job.get("progress") if job is not None else None
    if progress is None:
        return None
    stamp = progress.get("updated_at")
    return {**progress, "updated_at": stamp.isoformat() if hasattr(stamp, "isoformat") else stamp}


def register(sub: argparse._SubParsersAction[SoniqArgumentParser], common: SoniqArgumentParser) -> None:
    p = sub.add_parser("enqueue", parents=[common], help="queue one job by name; prints its id")
    p.add_argument("name", help="the registered job name")
    p.add_argument("--args", default=None, metavar="JSON", help="JSON object of keyword arguments, e.g. '{\"n\": 1}'")
    p.add_argument("--queue", default=None, help="queue to put it on (default: the job's own queue)")
    p.add_argument("--delay", type=float, default=None, metavar="SECONDS", help="run no earlier than this from now")
    p.set_defaults(func=cmd_enqueue, parser=p)

    p = sub.add_parser(
        "cancel", parents=[common], help="cancel a job: a queued one at once, a running one through its worker"
    )
    p.add_argument("job_id", metavar="ID", help="the job's id")
    p.add_argument("--json", action="store_true", help='print {"job_id": ..., "outcome": ...} instead of text')
    p.set_defaults(func=cmd_cancel, parser=p)

    p = sub.add_parser("logs", parents=[common], help="a job's progress and the records its handler logged")
    p.add_argument("job_id", metavar="ID", help="the job's id")
    p.add_argument("--json", action="store_true", help='print {"job_id", "progress", "logs": [...]} instead of text')
    p.set_defaults(func=cmd_logs, parser=p)
