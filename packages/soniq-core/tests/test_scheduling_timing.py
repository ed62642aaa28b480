"""Builders, cron and interval due times, DST days and catch-up policies, on an injected clock."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from soniq import ScheduleError, cron, daily, every, monthly, weekly
from soniq.scheduling.catchup import CatchUp, check_catch_up, plan_firing
from soniq.scheduling.timing import Timing


def local(zone: str, *parts: int, fold: int = 0) -> datetime:
    return datetime(*parts, tzinfo=ZoneInfo(zone), fold=fold).astimezone(UTC)  # type: ignore[misc]


def walk(timing: Timing, start: datetime, until: datetime) -> list[datetime]:
    out, current = [], start
    while True:
        current = timing.next_after(current)
        if current > until:
            return out
        out.append(current)


# -- builders ---------------------------------------------------------------------


def test_builders_give_cron_strings_and_seconds_a_timedelta() -> None:
    assert every(30).seconds() == timedelta(seconds=30)
    assert every(5).minutes() == "*/5 * * * *"
    assert every(2).hours() == "0 */2 * * *"
    assert every(3).days() == "0 0 */3 * *"
    assert daily().at("09:05") == "5 9 * * *"
    assert weekly().on("mon").at("08:30") == "30 8 * * 1"
    assert weekly().on("Sunday").at("00:00") == "0 0 * * 0"
    assert monthly().on_day(1).at("06:00") == "0 6 1 * *"
    assert str(daily()) == "0 0 * * *"
    assert cron("*/5  *  * * *") == "*/5 * * * *"


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (lambda: every(0), r"every\(n\)"),
        (lambda: daily().at("25:00"), "HH:MM"),
        (lambda: daily().at("9"), "HH:MM"),
        (lambda: weekly().on("funday"), "weekday"),
        (lambda: monthly().on_day(32), "1-31"),
    ],
)
def test_builders_refuse_bad_input(build: object, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        build()  # type: ignore[operator]


def test_invalid_cron_and_timezone_name_their_field() -> None:
    with pytest.raises(ScheduleError, match=r"^cron: ") as caught:
        cron("61 * * * *")
    assert caught.value.field == "cron"
    with pytest.raises(ScheduleError, match="timezone") as caught:
        Timing.parse(cron="0 9 * * *", timezone="Mars/Olympus")
    assert caught.value.field == "timezone"
    with pytest.raises(ScheduleError, match="every"):
        Timing.parse(every=0.5)
    with pytest.raises(ScheduleError, match="exactly one"):
        Timing.parse(cron="* * * * *", every=5)
    with pytest.raises(ScheduleError, match="catch_up"):
        check_catch_up("sometimes", 1)
    with pytest.raises(ScheduleError, match="catch_up_limit"):
        check_catch_up("all", 0)


# -- due times ------------------------------------------------------------------------


def test_cron_is_read_in_the_schedules_zone() -> None:
    timing = Timing.parse(cron=daily().at("09:00"), timezone="Europe/Berlin")
    after = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    assert timing.next_after(after) == datetime(2026, 7, 2, 7, 0, tzinfo=UTC)  # CEST = UTC+2


def test_every_is_elapsed_time_anchored_on_its_first_due_time() -> None:
    timing = Timing.parse(every=every(10).seconds())
    anchor = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)
    assert timing.first_after(anchor, anchor + timedelta(seconds=25)) == anchor + timedelta(seconds=30)
    assert timing.first_after(anchor, anchor - timedelta(seconds=5)) == anchor


@pytest.mark.parametrize(
    ("zone", "day", "wall", "expected"),
    [
        # Spring forward: 02:30 does not exist; it runs once, at 03:00 local.
        ("Europe/Berlin", (2026, 3, 29), "02:30", [(3, 0, 0)]),
        ("America/New_York", (2026, 3, 8), "02:30", [(3, 0, 0)]),
        # Fall back: 01:30 (New York) / 02:30 (Berlin) happen twice; each runs once, at the first.
        ("America/New_York", (2026, 11, 1), "01:30", [(1, 30, 0)]),
        ("Europe/Berlin", (2026, 10, 25), "02:30", [(2, 30, 0)]),
        # Times away from the change are not moved.
        ("Europe/Berlin", (2026, 3, 29), "04:15", [(4, 15, 0)]),
    ],
)
def test_a_skipped_or_repeated_wall_clock_time_runs_exactly_once_that_day(
    zone: str, day: tuple[int, int, int], wall: str, expected: list[tuple[int, int, int]]
) -> None:
    timing = Timing.parse(cron=daily().at(wall), timezone=zone)
    start = local(zone, *day, 0, 0) - timedelta(minutes=1)
    end = local(zone, *day, 23, 59)
    runs = walk(timing, start, end)
    assert [tuple(r.astimezone(ZoneInfo(zone)).timetuple()[3:6]) for r in runs] == expected
    assert [r.astimezone(ZoneInfo(zone)).fold for r in runs] == [fold for *_, fold in expected]


def test_a_start_inside_the_repeated_hour_does_not_rerun_the_first_pass() -> None:
    timing = Timing.parse(cron=daily().at("01:30"), timezone="America/New_York")
    second_pass = local("America/New_York", 2026, 11, 1, 1, 10, fold=1)  # after 01:30 EDT already ran
    assert timing.next_after(second_pass) == local("America/New_York", 2026, 11, 2, 1, 30)


def test_wildcard_hours_keep_real_time_through_a_dst_change() -> None:
    timing = Timing.parse(cron="*/30 * * * *", timezone="America/New_York")
    start = local("America/New_York", 2026, 11, 1, 0, 0)
    runs = walk(timing, start, start + timedelta(hours=3))
    assert all(b - a == timedelta(minutes=30) for a, b in itertools.pairwise(runs))
    assert len(runs) == 6


# -- catch-up policies -------------------------------------------------------------------


def _plan(policy: CatchUp, *, late: timedelta, limit: int = 1, timing: Timing | None = None):  # type: ignore[no-untyped-def]
    timing = timing or Timing.parse(every=60)
    due = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    return due, plan_firing(timing, next_run=due, now=due + late, policy=policy, limit=limit, poll_interval=1.0)


def test_not_due_yet_is_no_plan() -> None:
    _, plan = _plan(CatchUp.SKIP, late=-timedelta(seconds=1))
    assert plan is None


def test_on_time_runs_under_every_policy() -> None:
    for policy in CatchUp:
        due, plan = _plan(policy, late=timedelta(seconds=3))
        assert plan is not None
        assert plan.run == [due]
        assert plan.skipped == 0
        assert plan.next_run == due + timedelta(seconds=60)


def test_skip_drops_what_was_missed_during_downtime() -> None:
    # Every 5 minutes: the grace is a minute, so a due time 2 minutes old was missed.
    due, plan = _plan(CatchUp.SKIP, late=timedelta(minutes=32), timing=Timing.parse(every=300))
    assert plan is not None
    assert plan.run == []
    assert plan.skipped == 7
    assert plan.next_run == due + timedelta(minutes=35)


def test_skip_keeps_the_on_time_one_after_downtime() -> None:
    due, plan = _plan(CatchUp.SKIP, late=timedelta(minutes=10, seconds=5))
    assert plan is not None
    assert plan.run == [due + timedelta(minutes=10)]
    assert plan.skipped == 10


def test_latest_runs_only_the_most_recent() -> None:
    due, plan = _plan(CatchUp.LATEST, late=timedelta(minutes=10, seconds=30))
    assert plan is not None
    assert plan.run == [due + timedelta(minutes=10)]
    assert plan.skipped == 10


def test_all_runs_every_missed_one_up_to_the_cap() -> None:
    due, plan = _plan(CatchUp.ALL, late=timedelta(minutes=10, seconds=30), limit=100)
    assert plan is not None
    assert plan.run == [due + timedelta(minutes=m) for m in range(11)]
    assert plan.skipped == 0
    _, capped = _plan(CatchUp.ALL, late=timedelta(minutes=10, seconds=30), limit=3)
    assert capped is not None
    assert capped.run == [due + timedelta(minutes=m) for m in (8, 9, 10)]
    assert capped.skipped == 8


def test_catch_up_over_a_dst_night_counts_wall_clock_runs_once() -> None:
    timing = Timing.parse(cron=daily().at("02:30"), timezone="Europe/Berlin")
    first = local("Europe/Berlin", 2026, 3, 28, 2, 30)
    now = local("Europe/Berlin", 2026, 3, 31, 12, 0)
    plan = plan_firing(timing, next_run=first, now=now, policy=CatchUp.ALL, limit=10, poll_interval=1.0)
    assert plan is not None
    walls = [r.astimezone(ZoneInfo("Europe/Berlin")).strftime("%m-%d %H:%M") for r in plan.run]
    assert walls == ["03-28 02:30", "03-29 03:00", "03-30 02:30", "03-31 02:30"]
