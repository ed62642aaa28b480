"""The issue-14 parameters objects refuse bad values when built, naming the field, so no backend stores them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from soniq.params import (
    AcquireLeaseParams,
    DueSchedulesParams,
    FireScheduleParams,
    PruneDeadLettersParams,
    PruneJobsParams,
    UpsertScheduleParams,
)

NOW = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
NAIVE = datetime(2026, 3, 29, 1, 30)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cron": None}, "exactly one of cron and every_seconds"),
        ({"every_seconds": 60.0}, "exactly one of cron and every_seconds"),
        ({"cron": None, "every_seconds": 0.0}, "every_seconds must be positive"),
        ({"next_run": NAIVE}, "next_run must be a timezone-aware datetime"),
        ({"name": ""}, "schedule name must be a non-empty string"),
    ],
)
def test_upsert_refuses_a_schedule_without_one_timing_or_with_a_naive_next_run(
    fields: dict[str, object], message: str
) -> None:
    values: dict[str, object] = {"name": "digest", "job_name": "app.digest", "next_run": NOW, "cron": "0 9 * * *"}
    values.update(fields)
    with pytest.raises(ValueError, match=message):
        UpsertScheduleParams(**values)  # type: ignore[arg-type]


def test_a_valid_schedule_builds() -> None:
    params = UpsertScheduleParams(name="tick", job_name="app.tick", next_run=NOW, every_seconds=0.5)
    assert (params.cron, params.every_seconds, params.paused) == (None, 0.5, None)


@pytest.mark.parametrize("ttl", [0, -1.5, True, "30"])
def test_a_lease_needs_a_positive_ttl(ttl: object) -> None:
    with pytest.raises(ValueError, match="lease ttl must be a positive number of seconds"):
        AcquireLeaseParams(holder="node-a", ttl=ttl)  # type: ignore[arg-type]


def test_times_must_be_aware_and_limits_not_negative() -> None:
    with pytest.raises(ValueError, match="fire_schedule new_next_run must be a timezone-aware"):
        FireScheduleParams(name="x", expected_next_run=NOW, new_next_run=NAIVE, jobs=[], fired_at=NOW)
    with pytest.raises(ValueError, match="prune_jobs now must be a timezone-aware"):
        PruneJobsParams(now=NAIVE)
    with pytest.raises(ValueError, match="prune_jobs limit must be an int of 0 or more"):
        PruneJobsParams(limit=-1)
    with pytest.raises(ValueError, match="prune_dead_letters before must be a timezone-aware"):
        PruneDeadLettersParams(before=NAIVE)
    with pytest.raises(ValueError, match="due_schedules limit must be an int of 0 or more"):
        DueSchedulesParams(limit=-5)
