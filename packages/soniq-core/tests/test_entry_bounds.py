"""A bad value is refused where it enters, with a `SoniqError` naming it.

Limits (count and period, every form), job timeouts, `depends_on`, every numeric setting and
schedule intervals and cron text: each bound is refused one step past it and accepted at it.
"""

from __future__ import annotations

import asyncio
import math
import re
from datetime import timedelta
from typing import Any

import pytest

from soniq import InvalidLimitError, JobOptionsError, SettingsError, Soniq, SoniqError
from soniq.dependencies import MAX_DEPENDENCIES, normalize_depends_on
from soniq.errors import UnknownDependencyError
from soniq.limits import MAX_LIMIT_COUNT, MAX_RATE_PERIOD, MIN_RATE_PERIOD, parse_rate_limit
from soniq.scheduling.timing import MAX_CRON_LENGTH, MAX_EVERY_SECONDS, ScheduleError
from soniq.settings import Settings
from soniq.validation import MAX_JOB_TIMEOUT, MIN_JOB_TIMEOUT


def app() -> Soniq:
    return Soniq("memory://", observers="")


# -- A: limit values --------------------------------------------------------------------------

BAD_RATES: list[tuple[object, str]] = [
    ((1000, 1e-300), "period from 0.001 s"),
    ((1000, 1e-9), "period from 0.001 s"),
    ((1000, 0.0005), "period from 0.001 s"),
    ((1, 1e300), "period from 0.001 s"),
    ((1, MAX_RATE_PERIOD + 0.001), "period from 0.001 s"),
    ((1, 10**400), "period from 0.001 s"),
    ((1, 0.0015), "whole milliseconds"),
    ((MAX_LIMIT_COUNT + 1, 1.0), "at most 1,000,000,000 starts"),
    ((10**30, 1.0), "at most 1,000,000,000 starts"),
    ("1/99999999999999999999h", "must look like"),
    ("99999999999999999999/s", "must look like"),
    ("1/721h", "period from 0.001 s"),
    ("1000000001/s", "at most 1,000,000,000 starts"),
    ("1/" + "9" * 5000 + "s", "must look like"),
    ("1/\u0663s", "must look like"),  # an Arabic-Indic digit: only ASCII digits are read
]


@pytest.mark.parametrize(("rate", "fragment"), BAD_RATES, ids=[repr(r)[:40] for r, _ in BAD_RATES])
def test_a_rate_limit_no_store_can_enforce_is_refused_at_decoration(rate: object, fragment: str) -> None:
    soniq = app()
    options: dict[str, Any] = {"rate_limit": rate}
    with pytest.raises(InvalidLimitError, match=re.escape(fragment)) as info:
        soniq.job(name="limited", **options)(lambda: None)

    assert "rate_limit" in str(info.value)
    assert len(str(info.value)) < 300
    assert soniq.registry.get("limited") is None


@pytest.mark.parametrize("value", [0, -1, MAX_LIMIT_COUNT + 1, 2**63, 10**400])
def test_a_max_concurrent_past_its_bounds_is_refused_at_decoration(value: int) -> None:
    soniq = app()
    with pytest.raises(InvalidLimitError, match="max_concurrent"):
        soniq.job(name="limited", max_concurrent=value)(lambda: None)
    assert soniq.registry.get("limited") is None


def test_the_limit_bounds_themselves_are_accepted() -> None:
    assert parse_rate_limit((MAX_LIMIT_COUNT, MAX_RATE_PERIOD)) == (MAX_LIMIT_COUNT, MAX_RATE_PERIOD)
    assert parse_rate_limit((1, MIN_RATE_PERIOD)) == (1, 0.001)
    assert parse_rate_limit("1/720h") == (1, MAX_RATE_PERIOD)
    assert parse_rate_limit("5/0.25s") == (5, 0.25)
    soniq = app()
    soniq.job(name="most", max_concurrent=MAX_LIMIT_COUNT, rate_limit=(MAX_LIMIT_COUNT, MAX_RATE_PERIOD))(lambda: None)
    limit = soniq.group_limits()[0]
    assert (limit.max_concurrent, limit.rate_limit, limit.rate_period) == (
        MAX_LIMIT_COUNT,
        MAX_LIMIT_COUNT,
        MAX_RATE_PERIOD,
    )


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"rate_limit": "1/99999999999999999999h"}, "must look like"),
        ({"max_concurrent": 2**31}, "at most 1,000,000,000"),
        ({"rate_limit": "1/0.0001s"}, "period from 0.001 s"),
    ],
)
def test_queue_limits_past_the_bounds_are_refused_with_the_setting_named(spec: dict[str, Any], fragment: str) -> None:
    for source in ({"queue_limits": {"emails": spec}}, {"queue_limits": __import__("json").dumps({"emails": spec})}):
        with pytest.raises(SettingsError, match=re.escape(fragment)) as info:
            Settings.load(source, environ={})
        assert "setting 'queue_limits'" in str(info.value)
        assert "'emails'" in str(info.value)


# -- B: depends_on ------------------------------------------------------------------------------


def test_depends_on_is_capped_per_job() -> None:
    ids = [f"id-{n}" for n in range(MAX_DEPENDENCIES)]
    assert len(normalize_depends_on(ids + ids)) == MAX_DEPENDENCIES  # repeats count once
    with pytest.raises(JobOptionsError, match=r"more than 1,000 job ids") as info:
        normalize_depends_on([*ids, "one-more"])
    assert len(str(info.value)) < 300


def test_depends_on_past_the_cap_stores_nothing() -> None:
    soniq = app()

    @soniq.job(name="waits")
    async def waits() -> None: ...

    async def main() -> None:
        async with soniq:
            with pytest.raises(JobOptionsError, match="more than 1,000"):
                await soniq.enqueue("waits", depends_on=[str(n) for n in range(40_000)])
            assert (await soniq.get_queue_stats())["total"] == 0

    asyncio.run(main())


def test_the_unknown_dependency_message_lists_ten_ids_and_counts_the_rest() -> None:
    missing = [f"unknown-{n}" for n in range(1000)]
    error = UnknownDependencyError(missing)
    assert error.missing == tuple(missing)
    message = str(error)
    assert "1,000 unknown job id(s)" in message
    assert "unknown-9 and 990 more" in message
    assert "unknown-10" not in message
    assert len(message) < 400


# -- C: job timeouts ----------------------------------------------------------------------------

BAD_TIMEOUTS: list[object] = [
    math.nan,
    math.inf,
    -math.inf,
    -1,
    0,
    0.0,
    MIN_JOB_TIMEOUT / 2,
    MAX_JOB_TIMEOUT + 1,
    1e300,
    10**400,
    True,
    "5",
]


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS, ids=[repr(t)[:20] for t in BAD_TIMEOUTS])
def test_a_bad_job_timeout_is_refused_at_decoration(timeout: object) -> None:
    soniq = app()
    options: dict[str, Any] = {"timeout": timeout}
    with pytest.raises(JobOptionsError, match=r"timeout must be None or a number of seconds from 0\.001") as info:
        soniq.job(name="timed", **options)(lambda: None)
    assert isinstance(info.value, SoniqError)
    assert len(str(info.value)) < 300
    assert soniq.registry.get("timed") is None


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS[:-2], ids=[repr(t)[:20] for t in BAD_TIMEOUTS[:-2]])
def test_a_bad_job_timeout_setting_is_refused_with_its_name(timeout: object) -> None:
    with pytest.raises(SettingsError, match="setting 'job_timeout'"):
        Settings.load({"job_timeout": timeout}, environ={})
    if not isinstance(timeout, int) or abs(timeout) < 10**300:
        with pytest.raises(SettingsError, match="setting 'job_timeout'"):
            Settings.load(environ={"SONIQ_JOB_TIMEOUT": str(timeout)})


def test_the_timeout_bounds_themselves_are_accepted() -> None:
    soniq = app()
    for name, timeout in (("shortest", MIN_JOB_TIMEOUT), ("longest", MAX_JOB_TIMEOUT)):
        soniq.job(name=name, timeout=timeout)(lambda: None)
        definition = soniq.registry.get(name)
        assert definition is not None
        assert definition.timeout == timeout
    assert Settings.load({"job_timeout": MAX_JOB_TIMEOUT}, environ={}).job_timeout == MAX_JOB_TIMEOUT


def test_options_takes_no_timeout() -> None:
    # A timeout is the job's (`@app.job(timeout=)`, or the job_timeout setting); `.options()` has none to take.
    soniq = app()

    @soniq.job(name="timed")
    async def timed() -> None: ...

    with pytest.raises(TypeError, match="timeout"):
        timed.options(timeout=math.nan)  # type: ignore[attr-defined]


# -- D: every numeric setting has a floor and a ceiling -------------------------------------------

DAY = 86400.0
# name: (floor, ceiling, companions that make both bounds valid together, step past each bound)
BOUNDS: dict[str, tuple[float, float, dict[str, Any]]] = {
    "concurrency": (1, 10_000, {}),
    "job_timeout": (0.001, 30 * DAY, {}),
    "shutdown_timeout": (0, DAY, {}),
    "sync_handler_grace_seconds": (0, DAY, {}),
    "sync_handler_pool_size": (1, 10_000, {}),
    "heartbeat_interval": (0.1, 3600, {"heartbeat_timeout": DAY}),
    "heartbeat_timeout": (0.3, DAY, {"heartbeat_interval": 0.1}),
    "poll_interval": (0.01, 3600, {}),
    "prefetch": (0, 100_000, {"concurrency": 10_000}),
    "prefetch_release_timeout": (0.01, 3600, {}),
    "retry_backoff_base": (0, 365 * DAY, {"retry_backoff_max": 365 * DAY}),
    "retry_backoff_max": (0, 365 * DAY, {"retry_backoff_base": 0}),
    "max_args_bytes": (1, 64 * 1024 * 1024, {}),
    "unknown_job_timeout": (0.001, 36_500 * DAY, {}),
    "max_result_bytes": (1, 64 * 1024 * 1024, {}),
    "cancel_grace_seconds": (0, 3600, {}),
    "scheduler_poll_interval": (0.01, 3600, {}),
    "leader_lease_ttl": (0.5, 3600, {}),
    "prune_interval": (0.05, DAY, {}),
    "prune_batch_size": (1, 1_000_000, {}),
    "prune_pause": (0, 60, {}),
    "dead_letter_retention_days": (0.001, 36_500, {}),
    "snooze_max_seconds": (0.001, 365 * DAY, {}),
    "result_ttl": (0, 36_500 * DAY, {}),
    "pool_min_size": (0, 1000, {"pool_max_size": 1000}),
    "pool_max_size": (1, 1000, {"pool_min_size": 1}),
    "metrics_port": (1, 65535, {}),
    "loop_failure_limit": (1.0, DAY, {}),
    "max_shutdown_nacks": (1, 1000, {}),
    "job_log_max_bytes": (1024, 16 * 1024 * 1024, {}),
}


def test_every_numeric_setting_is_in_the_table() -> None:
    numeric = {
        name
        for name, value in Settings().__dict__.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }
    optional = {"job_timeout", "sync_handler_grace_seconds", "metrics_port", "dead_letter_retention_days"}
    assert numeric | optional | {"result_ttl", "pool_min_size", "pool_max_size"} == set(BOUNDS)


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_each_numeric_setting_takes_its_bounds_and_refuses_a_step_past_them(name: str) -> None:
    floor, ceiling, companions = BOUNDS[name]
    whole = isinstance(floor, int) and isinstance(ceiling, int)
    step = 1 if whole else max(floor * 0.5, 1e-9) if floor else 1e-9
    for accepted in (floor, ceiling):
        assert getattr(Settings.load({**companions, name: accepted}, environ={}), name) == accepted
    below = floor - (1 if whole else step)
    above = ceiling + (1 if whole else max(ceiling * 1e-6, 1e-3))
    for refused in (below, above, 1e300, -1e300, 10**400, math.nan, math.inf):
        with pytest.raises(SettingsError) as info:
            Settings.load({**companions, name: refused}, environ={})
        assert f"setting '{name}'" in str(info.value), (name, refused)
        assert len(str(info.value)) < 400


# -- E: schedules ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "every",
    [1e20, timedelta(days=10**8), 10**400, MAX_EVERY_SECONDS + 1, timedelta(days=3651)],
    ids=["1e20", "1e8 days", "10**400", "ceiling+1", "3651 days"],
)
def test_an_every_past_ten_years_is_a_schedule_error(every: object) -> None:
    soniq = app()

    @soniq.job(name="tick")
    async def tick() -> None: ...

    async def main() -> None:
        async with soniq:
            with pytest.raises(ScheduleError, match="every: must be at most 315360000 seconds"):
                await soniq.scheduler.add("tick", every=every)
            assert await soniq.scheduler.list() == []
            await soniq.scheduler.add("tick", every=MAX_EVERY_SECONDS)
            listed = await soniq.scheduler.get("tick")
            assert listed is not None
            assert listed["every_seconds"] == MAX_EVERY_SECONDS

    asyncio.run(main())
    with pytest.raises(ScheduleError, match="every"):
        soniq.periodic(every=every)


def test_cron_text_is_normalised_and_capped() -> None:
    soniq = app()

    @soniq.job(name="tick")
    async def tick() -> None: ...

    async def main() -> None:
        async with soniq:
            await soniq.scheduler.add("tick", cron="*/5" + " " * 100_000 + "* * * *" + " " * 100_000)
            stored = await soniq.scheduler.get("tick")
            assert stored is not None
            assert stored["cron"] == "*/5 * * * *"
            for cron in ("0" * 100_000 + " * * * *", "1," * MAX_CRON_LENGTH + "2 * * * *"):
                with pytest.raises(ScheduleError, match=f"at most {MAX_CRON_LENGTH} characters") as info:
                    await soniq.scheduler.add("tick", cron=cron, name="long")
                assert len(str(info.value)) < 300
            with pytest.raises(ScheduleError, match="not a valid cron expression"):
                await soniq.scheduler.add("tick", cron="9" * 200 + " * * * *", name="digits")
            assert [s["name"] for s in await soniq.scheduler.list()] == ["tick"]

    asyncio.run(main())


def test_check_interval_has_the_poll_interval_bounds() -> None:
    soniq = app()

    async def main() -> None:
        async with soniq:
            for interval in (1e-6, 0.009, 3601, math.nan):
                with pytest.raises(ScheduleError, match="check_interval"):
                    await soniq.scheduler.start(check_interval=interval)
            assert not soniq.scheduler.running

    asyncio.run(main())


@pytest.mark.parametrize(
    ("given", "blamed"),
    [
        ({"heartbeat_interval": 30}, "heartbeat_interval"),  # the default timeout (60 s) is below 3 x 30 s
        ({"heartbeat_timeout": 1}, "heartbeat_timeout"),
        ({"heartbeat_interval": 30, "heartbeat_timeout": 60}, "heartbeat_timeout"),
        ({"retry_backoff_base": 10**6}, "retry_backoff_base"),
        ({"retry_backoff_max": 0.0001, "retry_backoff_base": 1}, "retry_backoff_max"),
        ({"pool_max_size": 1, "pool_min_size": 5}, "pool_min_size"),
    ],
)
def test_a_pair_of_settings_out_of_order_blames_the_one_given(given: dict[str, Any], blamed: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.load(given, environ={})
    assert f"setting '{blamed}'" in str(info.value)
