from __future__ import annotations

import pytest

from soniq import SettingsError, StaleJobPolicy
from soniq.settings import Settings


def test_defaults_match_the_spec() -> None:
    s = Settings.load(environ={})
    assert (s.concurrency, s.shutdown_timeout, s.sync_handler_pool_size) == (4, 8.0, 8)
    assert (s.heartbeat_interval, s.heartbeat_timeout, s.poll_interval) == (5.0, 60.0, 1.0)
    assert (s.prefetch, s.prefetch_release_timeout, s.stale_job_policy) == (0, 5.0, StaleJobPolicy.REQUEUE)
    assert s.queues is None
    assert s.job_timeout is None
    assert s.resolved_database_url == "sqlite:///soniq.db"


def test_sync_grace_defaults_to_job_timeout_then_shutdown_timeout() -> None:
    assert Settings.load(environ={}).effective_sync_grace == 8.0
    assert Settings.load({"job_timeout": 12}, environ={}).effective_sync_grace == 12.0
    assert Settings.load({"job_timeout": 12, "sync_handler_grace_seconds": 3}, environ={}).effective_sync_grace == 3.0


def test_environment_variables_are_read_and_keywords_win() -> None:
    env = {"SONIQ_CONCURRENCY": "7", "SONIQ_QUEUES": "a, b", "SONIQ_STALE_JOB_POLICY": "dead_letter"}
    s = Settings.load(environ=env)
    assert (s.concurrency, s.queues, s.stale_job_policy) == (7, ("a", "b"), StaleJobPolicy.DEAD_LETTER)
    assert Settings.load({"concurrency": 2}, environ=env).concurrency == 2


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("concurrency", "zero", "expected a whole number"),
        ("concurrency", 0, "at least 1"),
        ("concurrency", True, "expected a whole number"),
        ("shutdown_timeout", "-1", "at least 0"),
        ("shutdown_timeout", "nan", "finite"),
        ("job_timeout", 0, "at least 0.001"),
        ("heartbeat_interval", "soon", "expected a number"),
        ("poll_interval", 0, "at least 0.01"),
        ("prefetch", -1, "at least 0"),
        ("prefetch_release_timeout", 0, "at least 0.01"),
        ("sync_handler_pool_size", 0, "at least 1"),
        ("sync_handler_grace_seconds", -5, "at least 0"),
        ("stale_job_policy", "bury", "expected one of requeue, dead_letter"),
        ("database_url", "not a url", "expected a URL"),
        ("queues", 42, "comma-separated"),
        ("max_args_bytes", 0, "at least 1"),
        ("heartbeat_timeout", 1, "at least 3 x heartbeat_interval"),
    ],
)
def test_every_bad_value_names_the_setting_and_its_variable(name: str, value: object, fragment: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.load({name: value}, environ={})
    message = str(info.value)
    assert fragment in message
    assert f"setting '{name}'" in message
    assert f"SONIQ_{name.upper()}" in message


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="SONIQ_SHUTDOWN_TIMEOUT"):
        Settings.load(environ={"SONIQ_SHUTDOWN_TIMEOUT": "thirty"})


def test_unknown_keyword_is_refused_with_the_known_names() -> None:
    with pytest.raises(TypeError, match=r"concurency.*known settings: .*concurrency"):
        Settings.load({"concurency": 3}, environ={})


def test_metrics_port_defaults_to_none_and_is_a_tcp_port() -> None:
    assert Settings.load(environ={}).metrics_port is None
    assert Settings.load(environ={"SONIQ_METRICS_PORT": "9464"}).metrics_port == 9464
    assert Settings.load(environ={"SONIQ_METRICS_PORT": ""}).metrics_port is None
    for bad, fragment in (("0", "at least 1"), ("70000", "between 1 and 65535"), ("http", "whole number")):
        with pytest.raises(SettingsError, match=fragment) as info:
            Settings.load(environ={"SONIQ_METRICS_PORT": bad})
        assert "SONIQ_METRICS_PORT" in str(info.value)
