"""What a scheduler enqueues for a schedule that is due: the catch-up decision, made in core.

A due time the scheduler notices within the schedule's *grace* (one period,
at most a minute, at least two scheduler polls) is on time and always runs.
Older ones were missed (every scheduler was down, or the schedule paused),
and the schedule's policy says what happens to them:

- ``skip`` (default): missed due times do not run.
- ``latest``: only the most recent due time runs, however late.
- ``all``: every missed due time runs, the most recent `catch_up_limit` of them.

The store then applies the plan with one fenced `fire_schedule`, so the
decision is made once per due time however many schedulers look at it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from soniq.scheduling.timing import ScheduleError, Timing

__all__ = ["MAX_CATCH_UP_LIMIT", "CatchUp", "FiringPlan", "check_catch_up", "plan_firing"]

MAX_CATCH_UP_LIMIT = 10_000
MAX_GRACE = timedelta(minutes=1)


class CatchUp(enum.StrEnum):
    SKIP = "skip"
    LATEST = "latest"
    ALL = "all"


def check_catch_up(catch_up: object, limit: object) -> tuple[CatchUp, int]:
    try:
        policy = CatchUp(catch_up.value if isinstance(catch_up, CatchUp) else str(catch_up).strip().lower())
    except ValueError:
        raise ScheduleError("catch_up", f"expected one of skip, latest, all, got {catch_up!r}") from None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CATCH_UP_LIMIT:
        raise ScheduleError("catch_up_limit", f"expected a whole number 1-{MAX_CATCH_UP_LIMIT}, got {limit!r}")
    return policy, limit


@dataclass(frozen=True, slots=True)
class FiringPlan:
    run: list[datetime]
    """Due times to enqueue now, oldest first (each becomes one job, `scheduled_at` = its due time)."""
    skipped: int
    """Missed due times the policy drops."""
    next_run: datetime
    """The schedule's first due time after `now`."""


def grace_for(timing: Timing, due: datetime, poll_interval: float) -> timedelta:
    period = timing.next_after(due) - due
    return max(min(period, MAX_GRACE), timedelta(seconds=2 * poll_interval))


def plan_firing(
    timing: Timing,
    *,
    next_run: datetime,
    now: datetime,
    policy: CatchUp,
    limit: int,
    poll_interval: float,
) -> FiringPlan | None:
    """The plan for a schedule whose stored due time is `next_run`; None when it is not due yet."""
    if next_run > now:
        return None
    keep = limit if policy is CatchUp.ALL else 1
    # Never walk more than needed: on-time ones are within the grace, so `keep` + a few covers them.
    grace = grace_for(timing, next_run, poll_interval)
    due, total = timing.due_times(next_run, now, keep=max(keep, 64))
    on_time = [d for d in due if now - d <= grace]
    missed = [d for d in due if now - d > grace]
    if policy is CatchUp.SKIP:
        chosen = on_time
    elif policy is CatchUp.LATEST:
        chosen = due[-1:]
    else:
        chosen = (missed + on_time)[-max(limit, len(on_time)) :]
    return FiringPlan(run=chosen, skipped=total - len(chosen), next_run=timing.first_after(next_run, now))
