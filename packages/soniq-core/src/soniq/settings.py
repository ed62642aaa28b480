"""Settings: constructor keywords over `SONIQ_*` environment variables over defaults.

Every value is validated when the app is built, so a typo fails at start-up
with the setting's name and its variable rather than deep inside a worker.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from soniq.errors import SettingsError
from soniq.records import StaleJobPolicy
from soniq.redaction import redact_url

DEFAULT_DATABASE_URL = "sqlite:///soniq.db"
MIN_POLL_INTERVAL = 0.01
MAX_CONCURRENCY = 10_000
HEARTBEAT_TIMEOUT_FACTOR = 3
PREFETCH_FACTOR = 10


def _parse_float(name: str, value: Any, *, minimum: float, allow_none: bool, strict: bool) -> float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        if allow_none:
            return None
        raise SettingsError(name, "a number is required")
    if isinstance(value, bool):
        raise SettingsError(name, f"expected a number of seconds, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SettingsError(name, f"expected a number of seconds, got {value!r}") from None
    if math.isnan(number) or math.isinf(number):
        raise SettingsError(name, f"expected a finite number, got {value!r}")
    if number < minimum or (strict and number == minimum):
        bound = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
        raise SettingsError(name, f"must be {bound}, got {value!r}")
    return number


def _parse_int(name: str, value: Any, *, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool):
        raise SettingsError(name, f"expected a whole number, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise SettingsError(name, f"expected a whole number, got {value!r}")
    try:
        number = int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise SettingsError(name, f"expected a whole number, got {value!r}") from None
    if number < minimum:
        raise SettingsError(name, f"must be at least {minimum}, got {value!r}")
    if maximum is not None and number > maximum:
        raise SettingsError(name, f"must be at most {maximum}, got {value!r}")
    return number


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _parse_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise SettingsError(name, f"expected true or false, got {value!r}")


def _parse_names(name: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    items: list[Any]
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
        items = [part for part in items if part]
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
    else:
        raise SettingsError(name, f"expected a comma-separated string or a list of names, got {value!r}")
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise SettingsError(name, f"every entry must be a non-empty string, got {item!r}")
    return tuple(item.strip() for item in items)


@dataclass(frozen=True)
class Settings:
    """Validated settings of one `Soniq` app. Build with `Settings.load`."""

    database_url: str | None = None
    jobs_modules: tuple[str, ...] = ()
    concurrency: int = 4
    queues: tuple[str, ...] | None = None
    job_timeout: float | None = None
    shutdown_timeout: float = 8.0
    sync_handler_grace_seconds: float | None = None
    sync_handler_pool_size: int = 8
    heartbeat_interval: float = 5.0
    heartbeat_timeout: float = 60.0
    poll_interval: float = 1.0
    prefetch: int = 0
    prefetch_release_timeout: float = 5.0
    stale_job_policy: StaleJobPolicy = StaleJobPolicy.REQUEUE
    observers: tuple[str, ...] | None = None
    retry_backoff_base: float = 1.0
    retry_backoff_max: float = 300.0
    max_args_bytes: int = 1_048_576
    metrics_port: int | None = None
    """The TCP port a worker serves ``/metrics`` on, when an exporter such as soniq-prometheus is installed."""
    unknown_job_timeout: float | None = 86400.0
    allow_no_jobs: bool = False
    max_result_bytes: int = 1_048_576
    cancel_grace_seconds: float = 5.0
    # -- compat-jobs (issue 12): the job API of soniq 0.1.0 --
    snooze_max_seconds: float = 30 * 86400.0
    """The longest a `Snooze` puts a job off; a longer one is cut down to this (0.1.0 defaulted to a day)."""
    # -- end compat-jobs --

    def __repr__(self) -> str:
        # Settings end up in tracebacks and error trackers: never with the database password.
        shown = ", ".join(
            f"{f.name}={redact_url(self.database_url)!r}"
            if f.name == "database_url" and self.database_url
            else f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
        )
        return f"Settings({shown})"

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or DEFAULT_DATABASE_URL

    @property
    def effective_sync_grace(self) -> float:
        """`sync_handler_grace_seconds`, else `job_timeout`, else `shutdown_timeout`."""
        if self.sync_handler_grace_seconds is not None:
            return self.sync_handler_grace_seconds
        if self.job_timeout is not None:
            return self.job_timeout
        return self.shutdown_timeout

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None, *, environ: Mapping[str, str] | None = None) -> Settings:
        """Keywords win over `SONIQ_<NAME>` variables, which win over defaults."""
        overrides = dict(overrides or {})
        env = os.environ if environ is None else environ
        known = cls.names()
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise TypeError(f"unknown Soniq setting(s): {', '.join(unknown)}; known settings: {', '.join(known)}")
        raw: dict[str, Any] = {}
        for name in known:
            if name in overrides:
                raw[name] = overrides[name]
            elif f"SONIQ_{name.upper()}" in env:
                raw[name] = env[f"SONIQ_{name.upper()}"]
        return cls()._with_raw(raw)

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with some values replaced, validated the same way."""
        unknown = sorted(set(overrides) - set(self.names()))
        if unknown:
            raise TypeError(f"unknown Soniq setting(s): {', '.join(unknown)}")
        return self._with_raw({k: v for k, v in overrides.items()})

    def _with_raw(self, raw: Mapping[str, Any]) -> Settings:
        parsed: dict[str, Any] = {}
        for name, value in raw.items():
            parsed[name] = _PARSERS[name](name, value)
        result = replace(self, **parsed)
        result._check_relations()
        return result

    def _check_relations(self) -> None:
        # Below three beats a worker busy for one slow sweep can look stale to itself and its peers.
        if self.heartbeat_timeout < HEARTBEAT_TIMEOUT_FACTOR * self.heartbeat_interval:
            raise SettingsError(
                "heartbeat_timeout",
                f"must be at least {HEARTBEAT_TIMEOUT_FACTOR} x heartbeat_interval "
                f"({HEARTBEAT_TIMEOUT_FACTOR * self.heartbeat_interval:g}s), got {self.heartbeat_timeout:g}s",
            )
        if self.prefetch > PREFETCH_FACTOR * self.concurrency:
            raise SettingsError(
                "prefetch",
                f"must be at most {PREFETCH_FACTOR} x concurrency ({PREFETCH_FACTOR * self.concurrency}), "
                f"got {self.prefetch}",
            )
        if self.retry_backoff_max < self.retry_backoff_base:
            raise SettingsError(
                "retry_backoff_max",
                f"must be at least retry_backoff_base ({self.retry_backoff_base:g}s), got {self.retry_backoff_max:g}s",
            )


def _url(name: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise SettingsError(name, f"expected a URL string, got {value!r}")
    if "://" not in value and not value.startswith("memory:"):
        raise SettingsError(name, f"expected a URL such as sqlite:///soniq.db, got {value!r}")
    return value


def _policy(name: str, value: Any) -> StaleJobPolicy:
    try:
        return StaleJobPolicy(value.value if isinstance(value, StaleJobPolicy) else str(value).strip().lower())
    except ValueError:
        choices = ", ".join(p.value for p in StaleJobPolicy)
        raise SettingsError(name, f"expected one of {choices}, got {value!r}") from None


def _observers(name: str, value: Any) -> tuple[str, ...] | None:
    if isinstance(value, str) and value.strip() == "":
        return ()
    return _parse_names(name, value)


def _positive(name: str, value: Any) -> float:
    result = _parse_float(name, value, minimum=0.0, allow_none=False, strict=True)
    assert result is not None
    return result


def _non_negative(name: str, value: Any) -> float:
    result = _parse_float(name, value, minimum=0.0, allow_none=False, strict=False)
    assert result is not None
    return result


def _optional_positive(name: str, value: Any) -> float | None:
    return _parse_float(name, value, minimum=0.0, allow_none=True, strict=True)


def _optional_non_negative(name: str, value: Any) -> float | None:
    return _parse_float(name, value, minimum=0.0, allow_none=True, strict=False)


def _at_least(minimum: int, maximum: int | None = None) -> Callable[[str, Any], int]:
    def parse(name: str, value: Any) -> int:
        return _parse_int(name, value, minimum=minimum, maximum=maximum)

    return parse


def _poll_interval(name: str, value: Any) -> float:
    # An idle worker issues one claim per poll: 1e-6 would be thousands of queries a second.
    result = _parse_float(name, value, minimum=MIN_POLL_INTERVAL, allow_none=False, strict=False)
    assert result is not None
    return result


def _modules(name: str, value: Any) -> tuple[str, ...]:
    return _parse_names(name, value) or ()


def _port(name: str, value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    port = _parse_int(name, value, minimum=1)
    if port > 65535:
        raise SettingsError(name, f"must be a TCP port between 1 and 65535, got {value!r}")
    return port


def _queues(name: str, value: Any) -> tuple[str, ...] | None:
    return _parse_names(name, value) or None


_PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "database_url": _url,
    "jobs_modules": _modules,
    "concurrency": _at_least(1, MAX_CONCURRENCY),
    "queues": _queues,
    "job_timeout": _optional_positive,
    "shutdown_timeout": _non_negative,
    "sync_handler_grace_seconds": _optional_non_negative,
    "sync_handler_pool_size": _at_least(1),
    "heartbeat_interval": _positive,
    "heartbeat_timeout": _positive,
    "poll_interval": _poll_interval,
    "prefetch": _at_least(0),
    "prefetch_release_timeout": _positive,
    "stale_job_policy": _policy,
    "observers": _observers,
    "retry_backoff_base": _non_negative,
    "retry_backoff_max": _non_negative,
    "max_args_bytes": _at_least(1),
    "metrics_port": _port,
    "unknown_job_timeout": _optional_positive,
    "allow_no_jobs": _parse_bool,
    "max_result_bytes": _at_least(1),
    "cancel_grace_seconds": _non_negative,
    # -- compat-jobs (issue 12) --
    "snooze_max_seconds": _positive,
    # -- end compat-jobs --
}
