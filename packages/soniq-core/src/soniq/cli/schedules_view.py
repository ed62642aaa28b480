"""The schedules and leader section of ``soniq inspect``.

On a backend without the `ScheduleStore` role there are no schedules and no leader lease: the
section says so (``"schedules": null``, ``"leader": null``) instead of failing the whole command."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from soniq import features
from soniq.backend import ScheduleStore, has_role
from soniq.cli.output import format_age, safe
from soniq.params import GetLeaseParams

if TYPE_CHECKING:
    from soniq.app import Soniq


async def schedules_and_leader(app: Soniq) -> dict[str, Any]:
    """Every schedule (with `orphaned`) and the current leader lease, JSON-ready; both None when
    the backend keeps no schedules (no `ScheduleStore` role)."""
    backend = await app.connected_backend()
    if not has_role(backend, ScheduleStore):
        return {"schedules": None, "leader": None, "missing_role": "ScheduleStore"}
    lease = await features.schedule_store(backend).get_lease(GetLeaseParams())
    now = datetime.now(UTC)
    schedules = []
    for view in await app.scheduler.list():
        schedules.append(
            {key: value.isoformat() if isinstance(value, datetime) else value for key, value in view.items()}
        )
    leader = None
    if lease is not None:
        leader = {
            "holder": lease.holder,
            "acquired_at": lease.acquired_at.isoformat(),
            "renewed_at": lease.renewed_at.isoformat(),
            "expires_at": lease.expires_at.isoformat(),
            "renewed_age_seconds": round((now - lease.renewed_at).total_seconds(), 3),
        }
    return {"schedules": schedules, "leader": leader}


def print_schedules_and_leader(section: dict[str, Any]) -> None:
    if section["schedules"] is None:
        print(f"leader, schedules: none (the backend has no {section.get('missing_role', 'ScheduleStore')} role)")
        return
    leader = section["leader"]
    if leader is None:
        print("leader: none (no process holds the lease)")
    else:
        print(
            f"leader: {safe(leader['holder'])}  renewed {format_age(leader['renewed_age_seconds'])} ago  "
            f"expires {leader['expires_at']}"
        )
    schedules = section["schedules"]
    print(f"schedules: {len(schedules) or 'none'}")
    for view in schedules:
        rhythm = f"cron {view['cron']} {view['timezone']}" if view["cron"] else f"every {view['schedule_value']}s"
        flags = [view["status"]]
        if view["orphaned"]:
            flags.append("ORPHANED: no live worker has this job")
        print(f"  {safe(view['name'])}  job {safe(view['job_name'])}  {rhythm}  {', '.join(flags)}")
        print(
            f"    next_run {view['next_run']}  last_run {view['last_run'] or '-'}  runs {view['run_count']}  "
            f"last_job_id {view['last_job_id'] or '-'}  catch_up {view['catch_up']}"
        )
