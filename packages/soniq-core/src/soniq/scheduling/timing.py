"""When a schedule is due: cron (parsed by cronsim) or a fixed interval, in the schedule's time zone.

Cron fields are wall-clock times in the schedule's IANA zone. On a
daylight-saving change day a fixed time that does not exist (02:30 on a
spring-forward night) runs once at the first minute after the gap, and one
that happens twice (01:30 on a fall-back night) runs once, at its first
occurrence; expressions with ``*`` in the minute or hour field keep counting
in real time through the change. That is Debian cron's rule, which cronsim
follows. `every` intervals are plain elapsed seconds and ignore time zones.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from soniq.errors import ScheduleError as ScheduleError
from soniq.errors import ScheduleTypeError as ScheduleTypeError
from soniq.limits import shown

__all__ = ["ScheduleError", "ScheduleTypeError", "Timing", "check_cron", "check_timezone"]

MAX_CRON_LENGTH = 256
"""The longest cron expression accepted, after its whitespace is normalised."""
MAX_EVERY_SECONDS = 3650 * 86400.0
"""The longest `every` interval, 10 years: every due time it yields stays a valid date."""

MAX_CRON_STEPS = 100_000
"""How many cron matches one look-ahead may walk before giving up (a far-away or impossible date)."""


def check_cron(expr: object) -> str:
    """`expr` as a cron string if cronsim accepts it (5 fields, or 6 with seconds first), its
    whitespace normalised to single spaces; longer than `MAX_CRON_LENGTH` after that is refused."""
    text = str(expr) if not isinstance(expr, str) and _is_builder(expr) else expr
    if not isinstance(text, str):
        raise ScheduleTypeError("cron", f"expected a cron expression string such as '*/5 * * * *', got {shown(expr)}")
    text = " ".join(text.split())
    if len(text) > MAX_CRON_LENGTH:
        raise ScheduleError(
            "cron", f"a cron expression is at most {MAX_CRON_LENGTH} characters, got {len(text):,}: {shown(text)}"
        )
    try:
        CronSim(text, datetime(2000, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError, OverflowError) as exc:
        raise ScheduleError("cron", f"{shown(text)} is not a valid cron expression ({exc})") from None
    return text


def _is_builder(value: object) -> bool:
    return type(value).__module__ == __name__.rsplit(".", 1)[0] + ".builders"


def check_timezone(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ScheduleError("timezone", f"expected an IANA time zone name such as 'Europe/Berlin', got {name!r}")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            "timezone", f"{name!r} is not a known IANA time zone (e.g. 'Europe/Berlin', 'UTC')"
        ) from None
    return name


def check_every(every: object) -> float:
    """`every` as seconds, from 1 to `MAX_EVERY_SECONDS`; anything else is `ScheduleError`."""
    if isinstance(every, timedelta):
        seconds = every.total_seconds()
    elif isinstance(every, (int, float)) and not isinstance(every, bool):
        try:
            seconds = float(every)
        except OverflowError:  # an int too large for a float: past the ceiling
            seconds = MAX_EVERY_SECONDS + 1
    else:
        raise ScheduleTypeError("every", f"expected seconds (a number) or a timedelta, got {shown(every)}")
    if not math.isfinite(seconds) or seconds < 1:
        raise ScheduleError("every", f"must be at least 1 second, got {shown(every)}")
    if seconds > MAX_EVERY_SECONDS:
        raise ScheduleError("every", f"must be at most {MAX_EVERY_SECONDS:.0f} seconds (10 years), got {shown(every)}")
    return seconds


@dataclass(frozen=True, slots=True)
class Timing:
    """A schedule's rhythm: exactly one of `cron` and `every_seconds`, and the zone cron is read in."""

    cron: str | None = None
    every_seconds: float | None = None
    timezone: str = "UTC"

    @classmethod
    def parse(cls, *, cron: object = None, every: object = None, timezone: object = "UTC") -> Timing:
        """Validate user input; each bad value raises `ScheduleError` naming its field."""
        if (cron is None) == (every is None):
            field = "cron" if cron is not None else "cron/every"
            raise ScheduleError(field, "pass exactly one of cron= and every=")
        zone = check_timezone(timezone)
        if cron is not None:
            return cls(cron=check_cron(cron), timezone=zone)
        return cls(every_seconds=check_every(every), timezone=zone)

    def describe(self) -> str:
        if self.cron is not None:
            return f"cron {self.cron!r} ({self.timezone})"
        return f"every {self.every_seconds:g}s"

    def next_after(self, after: datetime) -> datetime:
        """The first due time strictly after `after` (aware), in UTC."""
        after = after.astimezone(UTC)
        if self.every_seconds is not None:
            return after + timedelta(seconds=self.every_seconds)
        return self.first_cron_after(after)

    def first_after(self, anchor: datetime, now: datetime) -> datetime:
        """The first due time after `now` in the series that has `anchor` as a due time."""
        if self.every_seconds is not None and anchor <= now:
            steps = int((now - anchor).total_seconds() // self.every_seconds) + 1
            return anchor + timedelta(seconds=self.every_seconds * steps)
        return self.next_after(max(anchor, now)) if anchor <= now else anchor

    def first_cron_after(self, after: datetime) -> datetime:
        assert self.cron is not None
        zone = ZoneInfo(self.timezone)
        # cronsim reads the wall clock; a start inside a repeated hour can yield the first pass of a time
        # that is already behind us, so keep only matches that are really later.
        matches = CronSim(self.cron, after.astimezone(zone))
        for _ in range(MAX_CRON_STEPS):
            try:
                candidate = next(matches).astimezone(UTC)
            except StopIteration:  # pragma: no cover - cronsim iterates forever or raises
                break
            if candidate > after:
                return candidate
        raise ScheduleError("cron", f"{self.cron!r} has no due time after {after.isoformat()}")

    def due_times(self, start: datetime, until: datetime, *, keep: int) -> tuple[list[datetime], int]:
        """The due times from `start` (itself due) through `until`: the last `keep` of them, and how many there were."""
        if start > until:
            return [], 0
        if self.every_seconds is not None:
            step = self.every_seconds
            count = int((until - start).total_seconds() // step) + 1
            first = max(0, count - keep)
            return [start + timedelta(seconds=step * i) for i in range(first, count)], count
        kept: deque[datetime] = deque(maxlen=max(keep, 1))
        count = 0
        for current in self._cron_walk(start):
            if current > until:
                break
            count += 1
            kept.append(current)
        return (list(kept) if keep > 0 else []), count

    def _cron_walk(self, start: datetime) -> Iterator[datetime]:
        """`start`, then every later cron match in order, on one cronsim iterator."""
        assert self.cron is not None
        yield start
        previous = start
        matches = CronSim(self.cron, start.astimezone(ZoneInfo(self.timezone)))
        for candidate in matches:
            moment = candidate.astimezone(UTC)
            if moment > previous:
                previous = moment
                yield moment
