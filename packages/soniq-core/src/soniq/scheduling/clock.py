"""The scheduler's idea of now, swappable so tests can walk a schedule through a DST night in no time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, aware, in UTC."""


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told: ``clock.advance(seconds=90)`` or ``clock.set(...)``."""

    def __init__(self, start: datetime) -> None:
        self._now = self._aware(start)

    @staticmethod
    def _aware(moment: datetime) -> datetime:
        if moment.tzinfo is None:
            raise ValueError(f"ManualClock needs an aware datetime, got naive {moment!r}")
        return moment.astimezone(UTC)

    def now(self) -> datetime:
        return self._now

    def set(self, moment: datetime) -> None:
        self._now = self._aware(moment)

    def advance(self, delta: timedelta | None = None, /, **units: float) -> datetime:
        self._now += delta if delta is not None else timedelta(**units)
        return self._now
