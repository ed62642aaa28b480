"""soniq 0.1.0's setting names, the .env file, error codes and `Soniq(backend=NAME)`."""

from __future__ import annotations

from pathlib import Path

import pytest

from soniq import Settings, SettingsError, Soniq, SoniqError, UnknownJobError
from soniq.backend_names import BackendNameError
from soniq.legacy_settings import LEGACY_SETTINGS, UnknownSettingError, UnsupportedSettingError

# Every name of soniq 0.1.0's SoniqSettings and Soniq(...) constructor, read from its sdist.
NAMES_OF_0_1_0 = (
    "database_url",
    "jobs_modules",
    "concurrency",
    "queues",
    "max_retries",
    "priority",
    "enqueue_validation",
    "task_name_pattern",
    "producer_id",
    "route_map",
    "heartbeat_interval",
    "job_timeout",
    "cleanup_interval",
    "heartbeat_timeout",
    "poll_interval",
    "error_retry_delay",
    "sync_handler_pool_size",
    "shutdown_timeout",
    "sync_handler_grace_seconds",
    "pool_min_size",
    "pool_max_size",
    "pool_headroom",
    "log_level",
    "result_ttl",
    "snooze_max_seconds",
    "debug",
    "environment",
    "plugins",
    "autoload_plugins",
)


def test_every_0_1_0_name_is_in_the_table() -> None:
    assert sorted(LEGACY_SETTINGS) == sorted(NAMES_OF_0_1_0)


@pytest.mark.parametrize("name", [n for n in NAMES_OF_0_1_0 if LEGACY_SETTINGS[n].target is None])
def test_a_0_1_0_name_without_meaning_is_refused_saying_why(name: str) -> None:
    with pytest.raises(UnsupportedSettingError) as info:
        Settings.load({name: 1}, environ={})
    assert name in str(info.value)
    assert LEGACY_SETTINGS[name].note in str(info.value)
    assert info.value.code == "SONIQ_UNSUPPORTED_SETTING"


def test_0_1_0_names_with_a_meaning_are_accepted() -> None:
    s = Settings.load(
        {
            "enqueue_validation": "warn",
            "task_name_pattern": r"^[a-z.]+$",
            "producer_id": "billing-api",
            "route_map": {"billing.": "billing", "billing.eu.": "billing-eu"},
            "log_level": "warning",
            "pool_min_size": 2,
            "pool_max_size": 7,
        },
        environ={},
    )
    assert (s.enqueue_validation, s.task_name_pattern, s.producer_id, s.log_level) == (
        "warn",
        r"^[a-z.]+$",
        "billing-api",
        "WARNING",
    )
    assert s.route_map == (("billing.eu.", "billing-eu"), ("billing.", "billing"))
    assert (s.pool_min_size, s.pool_max_size) == (2, 7)


def test_debug_is_log_level_debug() -> None:
    assert Settings.load({"debug": True}, environ={}).log_level == "DEBUG"
    assert Settings.load({"debug": False}, environ={}).log_level is None
    assert Settings.load({}, environ={"SONIQ_DEBUG": "true"}).log_level == "DEBUG"


def test_an_unknown_name_suggests_the_closest() -> None:
    with pytest.raises(UnknownSettingError) as info:
        Settings.load({"heartbeat_intervall": 3}, environ={})
    assert "did you mean 'heartbeat_interval'?" in str(info.value)
    assert info.value.suggestion == "did you mean 'heartbeat_interval'?"
    assert isinstance(info.value, TypeError)
    with pytest.raises(UnknownSettingError, match=r"did you mean 'result_ttl'\?"):
        Settings.load({"result_tll": 3}, environ={})


def test_a_refused_name_in_the_environment_only_warns(caplog: pytest.LogCaptureFixture) -> None:
    s = Settings.load({}, environ={"SONIQ_CLEANUP_INTERVAL": "300", "SONIQ_CONCURRENCY": "3"})
    assert s.concurrency == 3
    assert "SONIQ_CLEANUP_INTERVAL is a soniq 0.1.0 setting" in caplog.text


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        ({"enqueue_validation": "loud"}, "enqueue_validation"),
        ({"task_name_pattern": "(["}, "task_name_pattern"),
        ({"route_map": {"billing.": ""}}, "route_map"),
        ({"route_map": "not json"}, "route_map"),
        ({"producer_id": ""}, "producer_id"),
        ({"log_level": "LOUD"}, "log_level"),
        ({"pool_min_size": 5, "pool_max_size": 2}, "pool_min_size"),
    ],
)
def test_bad_values_name_the_setting(overrides: dict[str, object], name: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.load(overrides, environ={})
    assert info.value.setting == name


def test_route_map_from_the_environment_is_json() -> None:
    s = Settings.load({}, environ={"SONIQ_ROUTE_MAP": '{"reports.": "reports"}'})
    assert s.route_map == (("reports.", "reports"),)


def test_a_dotenv_file_is_read_below_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("dotenv")
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("SONIQ_CONCURRENCY=7\nSONIQ_POLL_INTERVAL=2.5\nOTHER=1\nSONIQ_DEBUG=1\n")
    monkeypatch.delenv("SONIQ_CONCURRENCY", raising=False)
    monkeypatch.setenv("SONIQ_POLL_INTERVAL", "0.5")
    s = Settings.load({})
    assert s.concurrency == 7  # from the file
    assert s.poll_interval == 0.5  # the real environment wins
    assert s.log_level == "DEBUG"  # a 0.1.0 name in the file is translated too
    assert Soniq("memory://").settings.concurrency == 7


def test_an_explicit_env_file_that_is_missing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SoniqError, match="does not exist"):
        Settings.load({}, environ={}, env_file=tmp_path / "missing.env")


def test_error_codes_are_stable_and_suggest() -> None:
    error = UnknownJobError("no job 'x'")
    assert error.code == error.error_code == "SONIQ_UNKNOWN_TASK_NAME"
    assert error.suggestion is not None
    assert "register it with @app.job" in error.suggestion
    assert SettingsError("concurrency", "bad").code == "SONIQ_INVALID_SETTING"
    custom = SoniqError("it broke", "MY_CODE", suggestions=["restart it"])
    assert (custom.code, custom.suggestion, custom.suggestions, str(custom)) == (
        "MY_CODE",
        "restart it",
        ["restart it"],
        "it broke; restart it",
    )
    assert SoniqError("plain").code == "SONIQ_ERROR"


def test_every_error_class_has_its_own_code() -> None:
    import soniq

    classes = [c for c in vars(soniq).values() if isinstance(c, type) and issubclass(c, SoniqError)]
    codes = [c.code for c in classes]
    assert all(code.startswith("SONIQ_") for code in codes)
    assert len(set(codes)) == len(codes), codes


def test_backend_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SONIQ_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert Soniq(backend="memory").settings.resolved_database_url == "memory://"
    assert Soniq(backend="sqlite").settings.resolved_database_url == "sqlite:///soniq.db"
    assert Soniq(backend="sqlite", database_url="jobs.db").settings.database_url == "sqlite:///jobs.db"
    url = "postgresql://postgres@127.0.0.1:5432/test"
    assert Soniq(backend="postgres", database_url=url).settings.database_url == url
    monkeypatch.setenv("SONIQ_DATABASE_URL", url)
    assert Soniq(backend="postgres").settings.database_url == url
    # A server URL in the environment never leaks into an app that asked for memory.
    assert Soniq(backend="memory").settings.resolved_database_url == "memory://"
    with pytest.raises(BackendNameError, match="backend='redis' needs a redis:// URL"):
        Soniq(backend="redis")
    with pytest.raises(BackendNameError, match="backend='memory' but database_url is 'postgresql'"):
        Soniq(backend="memory", database_url=url)
    with pytest.raises(BackendNameError, match="not a backend name; use one of memory, sqlite, postgres, redis"):
        Soniq(backend="mongo")


def test_pool_sizes_reach_the_postgres_backend() -> None:
    app = Soniq("postgresql://postgres@127.0.0.1:5432/test", pool_min_size=1, pool_max_size=3)
    assert app.backend_options == {"min_size": 1, "max_size": 3}
    assert Soniq("memory://", pool_max_size=3).backend_options == {}
