"""``soniq status``, ``soniq inspect`` and ``soniq recover``: what the queue and its workers look like.

The counts and the workers are `QueueStore` reads, so these commands work on every backend. Without
`OperatorReads`, ``soniq status`` leaves out how many queued rows are scheduled for later
(``"scheduled_later": null``); ``soniq inspect`` shows no schedules without `ScheduleStore`, and
raises `MissingBackendRoleError` when limits are declared and the backend cannot count them."""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from soniq import features
from soniq.backend import OperatorReads, QueuePauseStore, has_role
from soniq.cli.common import EXIT_OK, CLIError, build_app, refuse_to_create_default, run_with_app
from soniq.cli.output import format_age, heartbeat_age, safe
from soniq.params import JobCountsParams
from soniq.records import RecoveryResult, WorkerRecord, WorkerStatus
from soniq.redaction import redact_url

if TYPE_CHECKING:
    from soniq.app import Soniq
    from soniq.cli.argparser import SoniqArgumentParser


def worker_view(worker: WorkerRecord, *, heartbeat_timeout: float, now: datetime) -> dict[str, Any]:
    """One worker as the commands show it; `stale` means silent longer than heartbeat_timeout."""
    age = heartbeat_age(worker.last_heartbeat, now=now)
    return {
        "id": worker.id,
        "hostname": worker.hostname,
        "pid": worker.pid,
        "status": worker.status.value,
        "queues": list(worker.queues) if worker.queues else None,
        "concurrency": worker.concurrency,
        "job_names": list(worker.job_names) if worker.job_names is not None else None,
        "job_versions": dict(sorted(worker.job_versions.items())) if worker.job_versions is not None else None,
        "last_heartbeat": worker.last_heartbeat.isoformat(),
        "heartbeat_age_seconds": round(age, 3),
        "stale": worker.status is not WorkerStatus.STOPPED and age > heartbeat_timeout,
        "started_at": worker.started_at.isoformat(),
    }


def _load(
    args: argparse.Namespace, command: str, *, stats: bool
) -> tuple[Soniq, dict[str, int], list[WorkerRecord], int | None]:
    """The app, its `get_queue_stats` counts, its worker rows, and how many queued rows are due later
    (None when the backend cannot count them: no `OperatorReads`)."""
    app = build_app(args, need_jobs=False)
    refuse_to_create_default(app, command)

    async def body(app: Soniq) -> tuple[dict[str, int], list[WorkerRecord], int | None]:
        backend = await app.connected_backend()
        queue = getattr(args, "queue", None)
        counts = await app.get_queue_stats(queue=queue) if stats else {}
        later: int | None = 0
        if stats and not has_role(backend, OperatorReads):
            later = None
        elif stats:
            reads = features.operator_reads(backend, features.JOB_COUNTS)
            per_queue = await reads.job_counts(JobCountsParams(queues=[queue] if queue else None))
            later = sum(c.scheduled for c in per_queue)
        return counts, await backend.list_workers(), later

    counts, workers, later = run_with_app(app, body)
    return app, counts, workers, later


def _worker_line(view: dict[str, Any]) -> str:
    stale = "STALE?" if view["stale"] else "-"
    return (
        f"{safe(view['id'])}  {safe(view['hostname'])}:{view['pid']}  {view['status']}  "
        f"heartbeat {format_age(view['heartbeat_age_seconds'])} ago  stale? {stale}"
    )


def cmd_status(args: argparse.Namespace) -> int:
    app, stats, workers, later = _load(args, "status", stats=True)
    now = datetime.now(UTC)
    timeout = app.settings.heartbeat_timeout
    views = [worker_view(w, heartbeat_timeout=timeout, now=now) for w in workers]
    if args.json:
        print(
            json.dumps(
                {
                    "database_url": redact_url(app.settings.resolved_database_url),
                    "stats": stats,
                    # Of `stats.queued`, the rows whose `scheduled_at` is still ahead (not due yet).
                    "scheduled_later": later,
                    "workers": views,
                },
                indent=2,
            )
        )
        return EXIT_OK
    print(f"{'database':>12}  {safe(redact_url(app.settings.resolved_database_url))}")
    for key, value in stats.items():
        if key == "queued" and later:
            print(f"{key:>12}  {value} ({value - later} due now, {later} scheduled for later)")
        else:
            print(f"{key:>12}  {value}")
    live = [v for v in views if v["status"] != WorkerStatus.STOPPED.value]
    stale = sum(1 for v in live if v["stale"])
    print(
        f"{'workers':>12}  {len(live)} running ({stale} stale?), {len(views) - len(live)} stopped; "
        f"stale means no heartbeat for over {timeout:g}s"
    )
    for view in live:
        print(f"{'':>12}  {_worker_line(view)}")
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace) -> int:
    app, _, workers, _ = _load(args, "inspect", stats=False)
    now = datetime.now(UTC)
    views = [worker_view(w, heartbeat_timeout=app.settings.heartbeat_timeout, now=now) for w in workers]
    if not args.all:
        views = [v for v in views if v["status"] != WorkerStatus.STOPPED.value]
    from soniq.cli.limits_view import limits_section, print_limits
    from soniq.cli.schedules_view import print_schedules_and_leader, schedules_and_leader

    async def sections(app: Soniq) -> dict[str, Any]:
        return {
            **await paused_section(app),
            **await schedules_and_leader(app),
            **await limits_section(app),
        }

    section = run_with_app(app, sections)
    if args.json:
        print(json.dumps({"heartbeat_timeout": app.settings.heartbeat_timeout, "workers": views, **section}, indent=2))
        return EXIT_OK
    if not views:
        print("no running workers" if not args.all else "no workers")
    for view in views:
        print(_worker_line(view))
        queues = ", ".join(safe(q) for q in view["queues"]) if view["queues"] else "all"
        print(f"    queues: {queues}  concurrency: {view['concurrency']}  started {view['started_at']}")
        names = view["job_names"]
        listed = "not reported" if names is None else (", ".join(safe(n) for n in names) or "none")
        print(f"    jobs: {listed}")
        versions = view["job_versions"]
        if versions is not None:
            shown = ", ".join(f"{safe(name)} v{version}" for name, version in versions.items()) or "none"
            print(f"    job versions: {shown}")
    print_paused(section)
    print_schedules_and_leader(section)
    print_limits(section)
    return EXIT_OK


async def paused_section(app: Soniq) -> dict[str, Any]:
    """``{"paused_queues": [...]}``, each ``{"queue", "reason", "paused_at"}`` (ISO); None when the
    backend stores no pauses (no `QueuePauseStore`)."""
    backend = await app.connected_backend()
    if not has_role(backend, QueuePauseStore):
        return {"paused_queues": None}
    rows = await app.paused_queues()
    return {"paused_queues": [{**row, "paused_at": row["paused_at"].isoformat()} for row in rows]}


def print_paused(section: dict[str, Any]) -> None:
    rows = section.get("paused_queues")
    if rows is None:
        return
    if not rows:
        print("paused queues: none")
        return
    shown = []
    for row in rows:
        reason = f" ({safe(row['reason'])})" if row["reason"] else ""
        shown.append(f"{safe(row['queue'])} since {row['paused_at']}{reason}")
    print(f"paused queues: {'; '.join(shown)}")


def cmd_recover(args: argparse.Namespace) -> int:
    stale_after: float | None = args.stale_after
    if stale_after is not None and (not math.isfinite(stale_after) or stale_after <= 0):
        raise CLIError(f"--stale-after must be a finite number of seconds above 0, got {stale_after!r}")
    app = build_app(args, need_jobs=False)
    refuse_to_create_default(app, "recover")
    if stale_after is not None and stale_after < app.settings.heartbeat_interval:
        print(
            f"soniq recover: warning: --stale-after {stale_after:g}s is under heartbeat_interval "
            f"({app.settings.heartbeat_interval:g}s); workers that are alive may be treated as gone",
            file=sys.stderr,
        )

    async def body(app: Soniq) -> RecoveryResult:
        from soniq.worker.loops import sweep_once

        # --stale-after bypasses the heartbeat_timeout setting on purpose: the operator knows the worker is gone.
        timeout = app.settings.heartbeat_timeout if stale_after is None else stale_after
        backend = await app.connected_backend()
        # log=False: the result is printed below, once.
        return await sweep_once(
            backend, app.bus, heartbeat_timeout=timeout, policy=app.settings.stale_job_policy, log=False
        )

    result = run_with_app(app, body)
    if result.skipped:
        print("another process is sweeping right now; nothing done")
        return EXIT_OK
    print(
        f"stale workers: {', '.join(safe(w) for w in result.stale_workers) or 'none'}; "
        f"requeued {len(result.requeued)} rows, dead-lettered {len(result.dead_lettered)}"
    )
    return EXIT_OK


def register(sub: argparse._SubParsersAction[SoniqArgumentParser], common: SoniqArgumentParser) -> None:
    p = sub.add_parser("status", parents=[common], help="queue counts and workers, with heartbeat age")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--queue", default=None, help="count only this queue")
    p.set_defaults(func=cmd_status, parser=p)

    p = sub.add_parser(
        "inspect",
        parents=[common],
        help="each worker: heartbeat age, stale?, queues, jobs and their versions; paused queues; schedules; limits",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--all", action="store_true", help="include stopped workers")
    p.set_defaults(func=cmd_inspect, parser=p)

    p = sub.add_parser("recover", parents=[common], help="one stale-worker sweep now")
    p.add_argument(
        "--stale-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="treat workers silent this long as gone (default: the heartbeat_timeout setting)",
    )
    p.set_defaults(func=cmd_recover, parser=p)
