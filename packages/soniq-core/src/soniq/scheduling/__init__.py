"""Periodic jobs: builders, time zones and catch-up, the `app.scheduler` service and its loop.

See docs/scheduling.md. Cron expressions are parsed by cronsim, soniq-core's
one runtime dependency.
"""

from __future__ import annotations

from soniq.scheduling.builders import cron, daily, every, monthly, weekly
from soniq.scheduling.catchup import CatchUp
from soniq.scheduling.clock import Clock, ManualClock, SystemClock
from soniq.scheduling.service import Scheduler
from soniq.scheduling.timing import ScheduleError, ScheduleTypeError, Timing

__all__ = [
    "CatchUp",
    "Clock",
    "ManualClock",
    "ScheduleError",
    "ScheduleTypeError",
    "Scheduler",
    "SystemClock",
    "Timing",
    "cron",
    "daily",
    "every",
    "monthly",
    "weekly",
]
