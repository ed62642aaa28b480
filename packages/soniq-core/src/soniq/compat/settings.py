"""soniq 0.1.0's setting names, and the ``.env`` file 0.1.0 read (also importable as `soniq.legacy_settings`).

Every name 0.1.0's `SoniqSettings` (and its `Soniq(...)` constructor) took is listed in
`LEGACY_SETTINGS` with what it becomes here: the same setting, another setting, or a
refusal that says why and what to use instead. A name that is neither ours nor 0.1.0's is
refused with the closest known name. A refused name found in the environment only logs a
warning, so old and new deployments can share one environment while migrating.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soniq.errors import SoniqError
from soniq.errors import UnknownSettingError as UnknownSettingError
from soniq.errors import UnsupportedSettingError as UnsupportedSettingError

logger = logging.getLogger("soniq.settings")

DEFAULT_ENV_FILE = ".env"


@dataclass(frozen=True, slots=True)
class LegacySetting:
    """What one 0.1.0 setting name becomes here.

    `target` is the setting it sets (None: refused, `note` says why and what to use);
    `convert` turns a 0.1.0 value into the target's, returning None to set nothing.
    """

    name: str
    target: str | None
    note: str
    convert: Callable[[Any], Any] | None = None


def _debug_to_log_level(value: Any) -> str | None:
    on = value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "t", "yes", "y", "on")
    return "DEBUG" if on else None


_PER_JOB = "set it per job instead: @app.job({option}=...)"

LEGACY_SETTINGS: dict[str, LegacySetting] = {
    entry.name: entry
    for entry in (
        LegacySetting("database_url", "database_url", "same; a URL (sqlite:///path.db for a file)"),
        LegacySetting("jobs_modules", "jobs_modules", "same"),
        LegacySetting("concurrency", "concurrency", "same"),
        LegacySetting("queues", "queues", "same; default changed from ['default'] to every queue"),
        LegacySetting(
            "max_retries",
            None,
            "there is no app-wide retry default here; "
            + _PER_JOB.format(option="max_retries")
            + ", or Soniq(retry_policy=...)",
        ),
        LegacySetting(
            "priority", None, "there is no app-wide priority default here; " + _PER_JOB.format(option="priority")
        ),
        LegacySetting("enqueue_validation", "enqueue_validation", "same (strict, warn or none)"),
        LegacySetting(
            "task_name_pattern", "task_name_pattern", "same; default changed from a lowercase dotted pattern to none"
        ),
        LegacySetting("producer_id", "producer_id", "same"),
        LegacySetting("route_map", "route_map", "same"),
        LegacySetting("heartbeat_interval", "heartbeat_interval", "same"),
        LegacySetting(
            "job_timeout", "job_timeout", "same; default changed from 300 to none, and 0 is refused (use None)"
        ),
        LegacySetting(
            "cleanup_interval",
            None,
            "workers sweep stale workers every heartbeat_interval and prune finished rows as their result_ttl "
            "passes; set heartbeat_interval or result_ttl instead",
        ),
        LegacySetting("heartbeat_timeout", "heartbeat_timeout", "same; default changed from 300 to 60"),
        LegacySetting("poll_interval", "poll_interval", "same; default changed from 5 to 1"),
        LegacySetting(
            "error_retry_delay",
            None,
            "the worker's pause after a backend error is its own and not configurable here; remove it",
        ),
        LegacySetting("sync_handler_pool_size", "sync_handler_pool_size", "same"),
        LegacySetting("shutdown_timeout", "shutdown_timeout", "same"),
        LegacySetting("sync_handler_grace_seconds", "sync_handler_grace_seconds", "same"),
        LegacySetting("pool_min_size", "pool_min_size", "same (PostgreSQL only)"),
        LegacySetting("pool_max_size", "pool_max_size", "same (PostgreSQL only)"),
        LegacySetting(
            "pool_headroom",
            None,
            "the PostgreSQL backend sizes its pool for the worker's concurrency by itself; "
            "set pool_max_size to fix the size",
        ),
        LegacySetting("log_level", "log_level", "same; read by the soniq CLI (--log-level wins)"),
        LegacySetting("result_ttl", "result_ttl", "same; default changed from 300 to none (rows kept)"),
        LegacySetting("snooze_max_seconds", "snooze_max_seconds", "same; default changed from 1 day to 30 days"),
        LegacySetting("debug", "log_level", "renamed: debug=True is log_level='DEBUG'", _debug_to_log_level),
        LegacySetting(
            "environment",
            None,
            "Soniq behaves the same in every environment here, so the name has nothing to select; remove it",
        ),
        LegacySetting(
            "plugins",
            None,
            "plugins are observers here: pass Soniq(extra_observers=[...]) or install an observer distribution "
            "(soniq.observers entry points)",
        ),
        LegacySetting(
            "autoload_plugins",
            None,
            "installed observers load by themselves (the observers setting chooses which); remove it",
        ),
    )
}
"""Every setting name of soniq 0.1.0, and what it is here."""


def _close_match(name: str, candidates: Sequence[str]) -> str | None:
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_setting(name: str, known: Sequence[str]) -> UnknownSettingError:
    closest = _close_match(name, sorted(set(known) | set(LEGACY_SETTINGS)))
    hint = f"did you mean {closest!r}?" if closest else None
    return UnknownSettingError(
        f"unknown Soniq setting {name!r}{f' ({hint})' if hint else ''}; known settings: {', '.join(known)}",
        suggestion=hint,
    )


def _refusal(entry: LegacySetting, known: Sequence[str]) -> UnsupportedSettingError:
    why = entry.note if entry.target is None else f"the {entry.target!r} setting is not part of this installation"
    return UnsupportedSettingError(
        f"{entry.name!r} is a soniq 0.1.0 setting with no meaning here: {why}", suggestion=None
    )


def translate(
    overrides: dict[str, Any], env: Mapping[str, str], known: Sequence[str]
) -> tuple[dict[str, Any], Mapping[str, str]]:
    """Keywords and environment with 0.1.0's names turned into ours; unknown or refused keywords raise."""
    known_set = set(known)
    result: dict[str, Any] = {}
    for name, value in overrides.items():
        if name in known_set:
            result[name] = value
            continue
        entry = LEGACY_SETTINGS.get(name)
        if entry is None:
            raise unknown_setting(name, known)
        if entry.target is None or entry.target not in known_set:
            raise _refusal(entry, known)
        converted = entry.convert(value) if entry.convert else value
        if converted is not None and entry.target not in overrides:
            result[entry.target] = converted
    return result, _translate_env(env, known_set)


def _translate_env(env: Mapping[str, str], known: set[str]) -> Mapping[str, str]:
    added: dict[str, str] = {}
    for entry in LEGACY_SETTINGS.values():
        if entry.name in known:
            continue
        variable = f"SONIQ_{entry.name.upper()}"
        if variable not in env:
            continue
        if entry.target is None or entry.target not in known:
            _warn_once(variable, entry)
            continue
        converted = entry.convert(env[variable]) if entry.convert else env[variable]
        target = f"SONIQ_{entry.target.upper()}"
        if converted is not None and target not in env:
            added[target] = str(converted)
    return {**env, **added} if added else env


_warned: set[str] = set()


def _warn_once(variable: str, entry: LegacySetting) -> None:
    if variable in _warned:
        return
    _warned.add(variable)
    why = entry.note if entry.target is None else f"the {entry.target!r} setting is not part of this installation"
    logger.warning("%s is a soniq 0.1.0 setting with no meaning here and is ignored: %s", variable, why)


def read_env_file(path: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """The ``SONIQ_*`` entries of a ``.env`` file (default ``./.env``), read with python-dotenv.

    An explicit `path` that does not exist, or a file present without python-dotenv
    installed, is an error: settings silently left out would be found much later.
    """
    explicit = path is not None
    file = Path(path if path is not None else DEFAULT_ENV_FILE)
    if not file.is_file():
        if explicit:
            raise SoniqError(f"env_file {str(file)!r} does not exist", suggestion="pass the path of an existing file")
        return {}
    try:
        from dotenv import dotenv_values
    except ImportError:
        if "SONIQ_" not in file.read_text(encoding="utf-8", errors="replace"):
            return {}  # another tool's .env: nothing of ours to miss
        raise SoniqError(
            f"{file} holds settings but python-dotenv is not installed to read it",
            suggestion="pip install 'soniq-core[dotenv]', or remove the file",
        ) from None
    values = dotenv_values(file)
    return {key: value for key, value in values.items() if key.startswith("SONIQ_") and value is not None}
