"""Readable ways to write a schedule: ``every(5).minutes()``, ``daily().at("09:00")`` and friends.

Each builder ends in a 5-field cron string (or, for ``every(n).seconds()``, a
`timedelta`, since cron cannot say "every 10 seconds"), so its result can be
passed straight to ``cron=`` / ``every=``. The bare ``daily()``, ``weekly()``
and ``monthly()`` also work there: their `str()` is midnight of that period.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

__all__ = [
    "DailyBuilder",
    "EveryBuilder",
    "MonthlyBuilder",
    "WeeklyBuilder",
    "cron",
    "daily",
    "every",
    "monthly",
    "weekly",
]

_WEEKDAYS = {
    name: number
    for number, names in enumerate(
        (
            ("sun", "sunday"),
            ("mon", "monday"),
            ("tue", "tuesday"),
            ("wed", "wednesday"),
            ("thu", "thursday"),
            ("fri", "friday"),
            ("sat", "saturday"),
        )
    )
    for name in names
}


def _hour_minute(text: object) -> tuple[int, int]:
    if isinstance(text, str) and text.count(":") == 1:
        hours, minutes = text.split(":")
        if hours.strip().isdigit() and minutes.strip().isdigit() and len(minutes.strip()) == 2:
            hour, minute = int(hours), int(minutes)
            if 0 <= hour <= 23 and 0 <= minute <= 59:
                return hour, minute
    raise ValueError(f"at() takes a 24-hour time 'HH:MM' between 00:00 and 23:59, got {text!r}")


def _weekday(day: object) -> int:
    if isinstance(day, bool):
        raise TypeError(f"on() takes a weekday name such as 'mon' or a number 0-6 (Sunday=0), got {day!r}")
    if isinstance(day, int):
        if 0 <= day <= 6:
            return day
    elif isinstance(day, str) and day.strip().lower() in _WEEKDAYS:
        return _WEEKDAYS[day.strip().lower()]
    raise ValueError(f"on() takes a weekday name such as 'mon' or a number 0-6 (Sunday=0), got {day!r}")


@dataclass(frozen=True, slots=True)
class EveryBuilder:
    """What `every(n)` returns; pick the unit."""

    n: int

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"every(n) takes a whole number >= 1, got {self.n!r}")

    def seconds(self) -> timedelta:
        return timedelta(seconds=self.n)

    def minutes(self) -> str:
        return f"*/{self.n} * * * *"

    def hours(self) -> str:
        return f"0 */{self.n} * * *"

    def days(self) -> str:
        return f"0 0 */{self.n} * *"


@dataclass(frozen=True, slots=True)
class DailyBuilder:
    def at(self, time: str) -> str:
        hour, minute = _hour_minute(time)
        return f"{minute} {hour} * * *"

    def __str__(self) -> str:
        return "0 0 * * *"


@dataclass(frozen=True, slots=True)
class WeeklyOnBuilder:
    weekday: int

    def at(self, time: str) -> str:
        hour, minute = _hour_minute(time)
        return f"{minute} {hour} * * {self.weekday}"

    def __str__(self) -> str:
        return f"0 0 * * {self.weekday}"


@dataclass(frozen=True, slots=True)
class WeeklyBuilder:
    def on(self, day: str | int) -> WeeklyOnBuilder:
        return WeeklyOnBuilder(_weekday(day))

    def __str__(self) -> str:
        return "0 0 * * 0"


@dataclass(frozen=True, slots=True)
class MonthlyOnDayBuilder:
    day: int

    def at(self, time: str) -> str:
        hour, minute = _hour_minute(time)
        return f"{minute} {hour} {self.day} * *"

    def __str__(self) -> str:
        return f"0 0 {self.day} * *"


@dataclass(frozen=True, slots=True)
class MonthlyBuilder:
    def on_day(self, day: int) -> MonthlyOnDayBuilder:
        if isinstance(day, bool) or not isinstance(day, int) or not 1 <= day <= 31:
            raise ValueError(f"on_day() takes a day of the month 1-31, got {day!r}")
        return MonthlyOnDayBuilder(day)

    def __str__(self) -> str:
        return "0 0 1 * *"


def every(n: int) -> EveryBuilder:
    """``every(30).seconds()`` is a `timedelta` for ``every=``; minutes/hours/days give cron strings."""
    return EveryBuilder(n)


def daily() -> DailyBuilder:
    """``daily().at("09:00")`` is ``"0 9 * * *"``."""
    return DailyBuilder()


def weekly() -> WeeklyBuilder:
    """``weekly().on("mon").at("09:00")`` is ``"0 9 * * 1"``."""
    return WeeklyBuilder()


def monthly() -> MonthlyBuilder:
    """``monthly().on_day(1).at("06:00")`` is ``"0 6 1 * *"``."""
    return MonthlyBuilder()


def cron(expr: str) -> str:
    """A cron expression as is, checked: ``cron("*/5 * * * *")``. Raises `ScheduleError` naming ``cron``
    (`ScheduleTypeError`, also a `TypeError` as in soniq 0.1.0, when `expr` is not a string)."""
    from soniq.scheduling.timing import check_cron

    return check_cron(expr)
