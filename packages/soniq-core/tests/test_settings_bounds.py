from __future__ import annotations

import pytest

from soniq import SettingsError
from soniq.settings import Settings


def test_new_settings_have_their_documented_defaults() -> None:
    s = Settings.load(environ={})
    assert s.shutdown_timeout == 8.0
    assert s.unknown_job_timeout == 86400.0
    assert s.allow_no_jobs is False
    assert s.max_result_bytes == 1_048_576
    assert s.cancel_grace_seconds == 5.0


def test_new_settings_are_read_from_the_environment() -> None:
    env = {
        "SONIQ_UNKNOWN_JOB_TIMEOUT": "none",
        "SONIQ_ALLOW_NO_JOBS": "true",
        "SONIQ_MAX_RESULT_BYTES": "2048",
        "SONIQ_CANCEL_GRACE_SECONDS": "0.5",
    }
    s = Settings.load(environ=env)
    assert (s.unknown_job_timeout, s.allow_no_jobs, s.max_result_bytes, s.cancel_grace_seconds) == (
        None,
        True,
        2048,
        0.5,
    )
    assert Settings.load({"allow_no_jobs": False}, environ=env).allow_no_jobs is False
    assert Settings.load(environ={"SONIQ_ALLOW_NO_JOBS": "off"}).allow_no_jobs is False


FLOAT_SETTINGS = [
    "job_timeout",
    "shutdown_timeout",
    "sync_handler_grace_seconds",
    "heartbeat_interval",
    "heartbeat_timeout",
    "poll_interval",
    "prefetch_release_timeout",
    "retry_backoff_base",
    "retry_backoff_max",
    "unknown_job_timeout",
    "cancel_grace_seconds",
]
INT_SETTINGS = ["concurrency", "sync_handler_pool_size", "prefetch", "max_args_bytes", "max_result_bytes"]


@pytest.mark.parametrize("name", FLOAT_SETTINGS + INT_SETTINGS)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), "nan", "inf", "1e400"])
def test_nan_and_infinity_are_refused_for_every_numeric_setting(name: str, value: object) -> None:
    with pytest.raises(SettingsError) as from_keyword:
        Settings.load({name: value}, environ={})
    with pytest.raises(SettingsError) as from_environment:
        Settings.load(environ={f"SONIQ_{name.upper()}": str(value)})
    for info in (from_keyword, from_environment):
        assert f"setting '{name}'" in str(info.value)
        assert f"SONIQ_{name.upper()}" in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "name", "fragment"),
    [
        ({"poll_interval": 1e-6}, "poll_interval", "at least 0.01"),
        ({"poll_interval": 0.009}, "poll_interval", "at least 0.01"),
        ({"heartbeat_interval": 5, "heartbeat_timeout": 14.9}, "heartbeat_timeout", "at least 3 x heartbeat_interval"),
        ({"concurrency": 2, "prefetch": 21}, "prefetch", "at most 10 x concurrency (20)"),
        ({"concurrency": 10_001}, "concurrency", "at most 10000"),
        ({"concurrency": 0}, "concurrency", "at least 1"),
        ({"allow_no_jobs": "maybe"}, "allow_no_jobs", "expected true or false"),
        ({"allow_no_jobs": 1}, "allow_no_jobs", "expected true or false"),
        ({"max_result_bytes": 0}, "max_result_bytes", "at least 1"),
        ({"cancel_grace_seconds": -1}, "cancel_grace_seconds", "at least 0"),
        ({"unknown_job_timeout": 0}, "unknown_job_timeout", "at least 0.001"),
    ],
)
def test_bounds_are_enforced_with_the_setting_named(overrides: dict[str, object], name: str, fragment: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.load(overrides, environ={})
    assert fragment in str(info.value)
    assert info.value.setting == name
    assert info.value.env_var == f"SONIQ_{name.upper()}"


def test_values_on_the_bounds_are_accepted() -> None:
    s = Settings.load(
        {
            "poll_interval": 0.01,
            "heartbeat_interval": 5,
            "heartbeat_timeout": 15,
            "concurrency": 10_000,
            "prefetch": 100_000,
        },
        environ={},
    )
    assert (s.poll_interval, s.heartbeat_timeout, s.concurrency, s.prefetch) == (0.01, 15.0, 10_000, 100_000)
