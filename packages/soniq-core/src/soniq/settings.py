"""Settings: constructor keywords over `SONIQ_*` environment variables over defaults.

Every value is validated when the app is built, so a typo fails at start-up
with the setting's name and its variable rather than deep inside a worker.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from soniq.backend.options import parse_bool
from soniq.compat.settings import read_env_file, translate
from soniq.encryption import INSTALL_HINT, check_keys
from soniq.encryption import available as encryption_available
from soniq.errors import SettingsError
from soniq.limits import queue_group_limits
from soniq.params import GroupLimit
from soniq.records import StaleJobPolicy
from soniq.redaction import redact_url
from soniq.retry import MAX_DELAY_SECONDS
from soniq.validation import MAX_JOB_TIMEOUT, MIN_JOB_TIMEOUT

DEFAULT_DATABASE_URL = "sqlite:///soniq.db"
MIN_POLL_INTERVAL = 0.01
MAX_CONCURRENCY = 10_000
# -- the bounds of the numeric settings (the table in docs/reliability.md) --
HOUR = 3600.0
DAY = 86400.0
MIN_HEARTBEAT_INTERVAL = 0.1
"""Below this a worker spends its time writing heartbeats."""
MIN_LEADER_LEASE_TTL = 0.5
"""The lease is renewed every third of it; 1e-6 would spin a core renewing it."""
MIN_PRUNE_INTERVAL = 0.05
MIN_RETENTION_DAYS = 0.001
"""`dead_letter_retention_days` below 86.4 s would delete dead letters as they are written."""
MAX_RETENTION_SECONDS = 36_500 * DAY
"""100 years: `result_ttl`, `unknown_job_timeout` and `dead_letter_retention_days` (in days) at most."""
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
"""`max_args_bytes` and `max_result_bytes` at most: 64 MiB, below every store's largest value."""
MAX_POOL_SIZE = 1_000
HEARTBEAT_TIMEOUT_FACTOR = 3
PREFETCH_FACTOR = 10
ENQUEUE_VALIDATION_MODES = ("strict", "warn", "none")
EVENT_LOOPS = ("auto", "asyncio", "uvloop")
"""Values of the `event_loop` setting."""
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _shown(value: Any) -> str:
    """`repr(value)` cut short, so an error never carries a huge input whole."""
    try:
        text = repr(value)
    except ValueError:  # an int too large to print
        return f"an int of {value.bit_length()} bits"
    return text if len(text) <= 80 else f"{text[:65]}... ({len(text):,} chars)"


def _parse_float(
    name: str, value: Any, *, minimum: float, allow_none: bool, strict: bool, maximum: float | None = None
) -> float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        if allow_none:
            return None
        raise SettingsError(name, "a number is required")
    if isinstance(value, bool):
        raise SettingsError(name, f"expected a number of seconds, got {value!r}")
    try:
        number = float(value)
    except OverflowError:
        raise SettingsError(name, f"expected a finite number, got {_shown(value)}") from None
    except (TypeError, ValueError):
        raise SettingsError(name, f"expected a number of seconds, got {_shown(value)}") from None
    if math.isnan(number) or math.isinf(number):
        raise SettingsError(name, f"expected a finite number, got {_shown(value)}")
    if number < minimum or (strict and number == minimum):
        bound = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
        raise SettingsError(name, f"must be {bound}, got {_shown(value)}")
    if maximum is not None and number > maximum:
        raise SettingsError(name, f"must be at most {maximum:g}, got {_shown(value)}")
    return number


def _parse_int(name: str, value: Any, *, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool):
        raise SettingsError(name, f"expected a whole number, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise SettingsError(name, f"expected a whole number, got {value!r}")
    try:
        number = int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError, OverflowError):
        raise SettingsError(name, f"expected a whole number, got {_shown(value)}") from None
    if number < minimum:
        raise SettingsError(name, f"must be at least {minimum}, got {_shown(value)}")
    if maximum is not None and number > maximum:
        raise SettingsError(name, f"must be at most {maximum}, got {_shown(value)}")
    return number


def _parse_bool(name: str, value: Any) -> bool:
    """The words every flag takes (`soniq.backend.options.parse_bool`); an empty environment variable is False."""
    if isinstance(value, str) and not value.strip():
        return False
    if isinstance(value, bool | str):
        try:
            return parse_bool(name, value)
        except ValueError:
            pass
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
    metrics_host: str = "127.0.0.1"
    """The address ``/metrics`` listens on (loopback unless you choose otherwise; ``0.0.0.0`` for all)."""
    loop_failure_limit: float = 60.0
    """Seconds an internal worker loop may keep failing (restarted with a growing pause) before the worker
    stops with an error and ``soniq worker`` exits with status 1."""
    unknown_job_timeout: float | None = 86400.0
    allow_no_jobs: bool = False
    log_jobs: bool = True
    """One INFO line per finished job on the ``soniq.jobs`` logger (``soniq worker --quiet-jobs`` turns it off)."""
    max_result_bytes: int = 1_048_576
    cancel_grace_seconds: float = 5.0
    max_shutdown_nacks: int = 10
    job_log_max_bytes: int = 65_536
    """Bytes of stored `ctx.logger` records one job keeps (as JSON); the oldest go first, with a marker."""
    """Shutdowns that may cut off one job's started handler and hand it back (each nack'd with
    attempts kept); the next one moves it to the dead-letter table with reason ``nack_limit``."""
    # -- schedules, leader lease, pruning --
    scheduler_enabled: bool = True
    """Workers run the scheduler loop (``soniq worker --no-scheduler`` turns it off for one)."""
    scheduler_poll_interval: float = 1.0
    """Seconds between the scheduler's looks for due schedules (and for ones added by other processes)."""
    leader_lease_ttl: float = 30.0
    """Seconds the leader lease lasts unless renewed; it is renewed every third of that."""
    prune_interval: float = 60.0
    """Seconds between the leader's pruning passes."""
    prune_batch_size: int = 1000
    """Rows one prune statement deletes at most."""
    prune_pause: float = 0.05
    """Seconds the leader waits between two prune batches, so claims never wait behind it."""
    dead_letter_retention_days: float | None = None
    """Dead-letter rows older than this many days are deleted by the leader; None keeps them forever."""
    # -- jobs --
    snooze_max_seconds: float = 30 * 86400.0
    """The longest a `Snooze` puts a job off; a longer one is cut down to this (0.1.0 defaulted to a day)."""
    # -- producers, names and connections --
    enqueue_validation: str = "strict"
    """What `enqueue` does with a job name no local job registers: ``strict`` refuses it,
    ``warn`` logs (at most once a minute per name) and stores it, ``none`` stores it silently."""
    task_name_pattern: str | None = None
    """A regular expression every job name must match, at ``@app.job`` and at enqueue; None: any name."""
    route_map: tuple[tuple[str, str], ...] = ()
    """Name prefix -> queue for jobs registered without a queue; the longest matching prefix wins."""
    producer_id: str = "auto"
    """Stamped on every row this app enqueues; ``auto`` is ``<hostname>:<pid>:<program>``."""
    log_level: str | None = None
    """Level of the ``soniq`` loggers for the CLI when ``--log-level`` is not given."""
    pool_min_size: int | None = None
    pool_max_size: int | None = None
    """PostgreSQL connection pool bounds (the backend's ``min_size`` / ``max_size``); other backends ignore them."""
    # -- results, limits, the event loop --
    result_ttl: float | None = None
    """Seconds a finished job's row is kept: None forever, 0 deleted on completion (see soniq.retention)."""
    queue_limits: tuple[GroupLimit, ...] = ()
    """Per-queue limits, ``{"queue": {"max_concurrent": N, "rate_limit": "N/s"}}`` (JSON in
    ``SONIQ_QUEUE_LIMITS``), enforced by the store across every worker; kept in queue order."""
    event_loop: str = "auto"
    """The event loop ``soniq worker`` runs on: ``auto`` (uvloop when it is installed, as with
    ``pip install soniq-core[speed]``), ``uvloop`` (required: refuses to start without it) or ``asyncio``."""
    # -- encryption --
    encryption_keys: tuple[str, ...] = ()
    """Fernet keys, newest first (``SONIQ_ENCRYPTION_KEYS``, comma-separated): the first seals, every
    one opens (see soniq.encryption). Never shown in a repr."""
    encrypt_all: bool = False
    """Seal every job's arguments, result and progress message, not only ``@app.job(encrypted=True)``'s."""

    def __repr__(self) -> str:
        # Settings end up in tracebacks and error trackers: never with the database password.
        shown = ", ".join(
            f"{f.name}={redact_url(self.database_url)!r}"
            if f.name == "database_url" and self.database_url
            else f"{f.name}=<{len(self.encryption_keys)} key(s)>"
            if f.name == "encryption_keys"
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
    def load(
        cls,
        overrides: Mapping[str, Any] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        env_file: str | os.PathLike[str] | None = None,
    ) -> Settings:
        """Keywords win over `SONIQ_<NAME>` variables, which win over a ``.env`` file, which wins over defaults.

        The ``.env`` file (`env_file`, else ``./.env`` when `environ` is not given) is read with
        python-dotenv (``pip install soniq-core[dotenv]``), as soniq 0.1.0 read it. soniq 0.1.0's
        setting names are accepted where they mean something here (see `soniq.compat.settings`).
        """
        known = cls.names()
        env: Mapping[str, str] = os.environ if environ is None else environ
        if env_file is not None or environ is None:
            from_file = read_env_file(env_file)
            if from_file:
                env = {**from_file, **env}
        overrides, env = translate(dict(overrides or {}), env, known)
        raw: dict[str, Any] = {}
        for name in known:
            if name in overrides:
                raw[name] = overrides[name]
            elif f"SONIQ_{name.upper()}" in env:
                raw[name] = env[f"SONIQ_{name.upper()}"]
        return cls()._with_raw(raw)

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with some values replaced, validated the same way."""
        overrides, _ = translate(dict(overrides), {}, self.names())
        return self._with_raw({k: v for k, v in overrides.items()})

    def _with_raw(self, raw: Mapping[str, Any]) -> Settings:
        parsed: dict[str, Any] = {}
        for name, value in raw.items():
            parsed[name] = _PARSERS[name](name, value)
        result = replace(self, **parsed)
        result._check_relations(set(parsed))
        return result

    def _check_relations(self, given: set[str]) -> None:
        """Settings that bound each other; the error names the one that was given when only one was."""

        def refuse(named: str, says: str, other: str, other_says: str) -> None:
            """`named` is to blame, unless only `other` was given."""
            if other in given and named not in given:
                raise SettingsError(other, other_says)
            raise SettingsError(named, says)

        if self.encrypt_all and not self.encryption_keys:
            refuse(
                "encrypt_all",
                "needs encryption_keys (SONIQ_ENCRYPTION_KEYS): there is no key to seal with",
                "encryption_keys",
                "must hold at least one key when encrypt_all is set",
            )
        low, high = self.pool_min_size, self.pool_max_size
        if low is not None and high is not None and low > high:
            refuse(
                "pool_min_size",
                f"must be at most pool_max_size ({high}), got {low}",
                "pool_max_size",
                f"must be at least pool_min_size ({low}), got {high}",
            )
        # Below three beats a worker busy for one slow sweep can look stale to itself and its peers.
        factor = HEARTBEAT_TIMEOUT_FACTOR
        if self.heartbeat_timeout < factor * self.heartbeat_interval - 1e-9:  # 0.3 vs 3 x 0.1
            refuse(
                "heartbeat_timeout",
                f"must be at least {factor} x heartbeat_interval ({factor * self.heartbeat_interval:g}s), "
                f"got {self.heartbeat_timeout:g}s",
                "heartbeat_interval",
                f"must be at most heartbeat_timeout / {factor} ({self.heartbeat_timeout / factor:g}s), "
                f"got {self.heartbeat_interval:g}s",
            )
        if self.prefetch > PREFETCH_FACTOR * self.concurrency:
            refuse(
                "prefetch",
                f"must be at most {PREFETCH_FACTOR} x concurrency ({PREFETCH_FACTOR * self.concurrency}), "
                f"got {self.prefetch}",
                "concurrency",
                f"must be at least prefetch / {PREFETCH_FACTOR} ({-(-self.prefetch // PREFETCH_FACTOR)}), "
                f"got {self.concurrency}",
            )
        if self.retry_backoff_max < self.retry_backoff_base:
            refuse(
                "retry_backoff_max",
                f"must be at least retry_backoff_base ({self.retry_backoff_base:g}s), got {self.retry_backoff_max:g}s",
                "retry_backoff_base",
                f"must be at most retry_backoff_max ({self.retry_backoff_max:g}s), got {self.retry_backoff_base:g}s",
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


def _seconds(
    minimum: float, maximum: float, *, strict: bool = False, optional: bool = False
) -> Callable[[str, Any], Any]:
    """A parser of a number of seconds (or days) from `minimum` (excluded when `strict`) to `maximum`."""

    def parse(name: str, value: Any) -> float | None:
        return _parse_float(name, value, minimum=minimum, maximum=maximum, allow_none=optional, strict=strict)

    return parse


def _at_least(minimum: int, maximum: int) -> Callable[[str, Any], int]:
    def parse(name: str, value: Any) -> int:
        return _parse_int(name, value, minimum=minimum, maximum=maximum)

    return parse


def _modules(name: str, value: Any) -> tuple[str, ...]:
    return _parse_names(name, value) or ()


def _port(name: str, value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    port = _parse_int(name, value, minimum=1)
    if port > 65535:
        raise SettingsError(name, f"must be a TCP port between 1 and 65535, got {_shown(value)}")
    return port


def _host(name: str, value: Any) -> str:
    """An address to bind: a host name or IP literal, no spaces or control characters."""
    text = value.strip() if isinstance(value, str) else None
    if not text or any(ch.isspace() or not ch.isprintable() for ch in text) or len(text) > 255:
        raise SettingsError(name, f"expected an address to listen on such as 127.0.0.1 or 0.0.0.0, got {value!r}")
    return text


def _queues(name: str, value: Any) -> tuple[str, ...] | None:
    return _parse_names(name, value) or None


_PARSERS: dict[str, Callable[[str, Any], Any]] = {
    # Every numeric setting has a floor and a ceiling, listed in docs/reliability.md.
    "database_url": _url,
    "jobs_modules": _modules,
    "concurrency": _at_least(1, MAX_CONCURRENCY),
    "queues": _queues,
    "job_timeout": _seconds(MIN_JOB_TIMEOUT, MAX_JOB_TIMEOUT, optional=True),
    "shutdown_timeout": _seconds(0.0, DAY),
    "sync_handler_grace_seconds": _seconds(0.0, DAY, optional=True),
    "sync_handler_pool_size": _at_least(1, MAX_CONCURRENCY),
    "heartbeat_interval": _seconds(MIN_HEARTBEAT_INTERVAL, HOUR),
    "heartbeat_timeout": _seconds(0.3, DAY),  # 3 x MIN_HEARTBEAT_INTERVAL
    "poll_interval": _seconds(MIN_POLL_INTERVAL, HOUR),
    "prefetch": _at_least(0, PREFETCH_FACTOR * MAX_CONCURRENCY),
    "prefetch_release_timeout": _seconds(MIN_POLL_INTERVAL, HOUR),
    "stale_job_policy": _policy,
    "observers": _observers,
    "retry_backoff_base": _seconds(0.0, MAX_DELAY_SECONDS),
    "retry_backoff_max": _seconds(0.0, MAX_DELAY_SECONDS),
    "max_args_bytes": _at_least(1, MAX_PAYLOAD_BYTES),
    "metrics_port": _port,
    "metrics_host": lambda name, value: _host(name, value),
    "loop_failure_limit": _seconds(1.0, DAY),
    "unknown_job_timeout": _seconds(MIN_JOB_TIMEOUT, MAX_RETENTION_SECONDS, optional=True),
    "allow_no_jobs": _parse_bool,
    "log_jobs": _parse_bool,
    "max_result_bytes": _at_least(1, MAX_PAYLOAD_BYTES),
    "cancel_grace_seconds": _seconds(0.0, HOUR),
    "max_shutdown_nacks": _at_least(1, 1000),
    "job_log_max_bytes": _at_least(1024, 16 * 1024 * 1024),
    # -- schedules, leader lease, pruning --
    "scheduler_enabled": _parse_bool,
    "scheduler_poll_interval": _seconds(MIN_POLL_INTERVAL, HOUR),
    "leader_lease_ttl": _seconds(MIN_LEADER_LEASE_TTL, HOUR),
    "prune_interval": _seconds(MIN_PRUNE_INTERVAL, DAY),
    "prune_batch_size": _at_least(1, 1_000_000),
    "prune_pause": _seconds(0.0, 60.0),
    "dead_letter_retention_days": _seconds(MIN_RETENTION_DAYS, MAX_RETENTION_SECONDS / DAY, optional=True),
    # -- producers, names and connections --
    "enqueue_validation": lambda name, value: _choice(name, value, ENQUEUE_VALIDATION_MODES),
    "task_name_pattern": lambda name, value: _pattern(name, value),
    "route_map": lambda name, value: _route_map(name, value),
    "producer_id": lambda name, value: _producer_id(name, value),
    "log_level": lambda name, value: _log_level(name, value),
    "pool_min_size": lambda name, value: _optional_int(name, value, minimum=0),
    "pool_max_size": lambda name, value: _optional_int(name, value, minimum=1),
    # -- jobs, results, limits, the event loop --
    "snooze_max_seconds": _seconds(MIN_JOB_TIMEOUT, MAX_DELAY_SECONDS),
    "result_ttl": _seconds(0.0, MAX_RETENTION_SECONDS, optional=True),
    "queue_limits": lambda name, value: _queue_limits(name, value),
    "event_loop": lambda name, value: _choice(name, value, EVENT_LOOPS),
    "encryption_keys": lambda name, value: _encryption_keys(name, value),
    "encrypt_all": _parse_bool,
}


def _encryption_keys(name: str, value: Any) -> tuple[str, ...]:
    try:
        keys = check_keys(value)
    except ValueError as exc:
        raise SettingsError(name, str(exc)) from None
    if keys and not encryption_available():
        raise SettingsError(name, f"encryption needs the cryptography package: {INSTALL_HINT}")
    return keys


# -- parsers of the producer, name and connection settings --


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    text = str(value).strip().lower() if isinstance(value, str) else None
    if text not in choices:
        raise SettingsError(name, f"expected one of {', '.join(choices)}, got {value!r}")
    return text


def _pattern(name: str, value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return None
    if not isinstance(value, str):
        raise SettingsError(name, f"expected a regular expression string, got {value!r}")
    try:
        re.compile(value)
    except re.error as exc:
        raise SettingsError(name, f"is not a valid regular expression ({exc}): {value!r}") from None
    return value


def _route_map(name: str, value: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(value, str):
        # SONIQ_ROUTE_MAP: JSON, as pydantic-settings read it in 0.1.0.
        if not value.strip():
            return ()
        try:
            value = json.loads(value)
        except ValueError:
            example = '{"billing.": "billing"}'
            raise SettingsError(name, f"expected a JSON object such as {example}, got {value!r}") from None
    if isinstance(value, tuple) and all(isinstance(item, tuple) and len(item) == 2 for item in value):
        value = dict(value)
    if not isinstance(value, Mapping):
        raise SettingsError(name, f"expected a mapping of name prefix to queue, got {value!r}")
    pairs = []
    for prefix, queue in value.items():
        if not isinstance(prefix, str) or not prefix or not isinstance(queue, str) or not queue.strip():
            raise SettingsError(
                name, f"every entry must map a non-empty prefix to a queue name, got {prefix!r}: {queue!r}"
            )
        pairs.append((prefix, queue.strip()))
    # Longest prefix first, so the first match is the one that wins.
    return tuple(sorted(pairs, key=lambda pair: (-len(pair[0]), pair[0])))


def _producer_id(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(name, f"expected a non-empty string (or 'auto'), got {value!r}")
    if len(value) > 255:
        raise SettingsError(name, f"must be at most 255 characters, got {len(value)}")
    return value.strip()


def _log_level(name: str, value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return None
    text = str(value).strip().upper() if isinstance(value, str) else None
    if text not in LOG_LEVELS:
        raise SettingsError(name, f"expected one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return text


def _optional_int(name: str, value: Any, *, minimum: int) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    return _parse_int(name, value, minimum=minimum, maximum=MAX_POOL_SIZE)


# -- fleet-wide limits --


def _queue_limits(name: str, value: Any) -> tuple[GroupLimit, ...]:
    if value is None:
        return ()
    if isinstance(value, tuple) and all(isinstance(item, GroupLimit) for item in value):
        return value  # already parsed (a copy of these settings)
    if isinstance(value, str):
        if not value.strip():
            return ()
        try:
            value = json.loads(value)
        except ValueError:
            example = '{"emails": {"max_concurrent": 5, "rate_limit": "10/s"}}'
            raise SettingsError(name, f"expected a JSON object such as {example}, got {value!r}") from None
    if not isinstance(value, Mapping):
        raise SettingsError(name, f"expected a mapping of queue name to its limits, got {value!r}")
    return queue_group_limits(value, error=lambda message: SettingsError(name, message))
