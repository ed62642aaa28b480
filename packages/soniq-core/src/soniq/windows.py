"""Unique windows (`unique_for=`) and debounce (`debounce=`, `debounce_max_wait=`).

Core decides every value here and the store only applies them (see the roles `UniqueWindows`
and `DebouncedJobs` in `soniq.backend`): a window job carries its key and the window's start and
end; a debounced job carries its key as `dedup_key`, its start (now + `debounce`) and the
deadline its start may never pass (first enqueue + `debounce_max_wait`). All times are this
producer's clock, so a store compares them without one of its own.

Both key on `dedup_key` when one is given, else on the job's name and its arguments as bound to
the handler (defaults filled in, so ``f()`` and ``f(x=1)`` share a key when ``x`` defaults to 1).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from soniq.records import NewJob, UniqueWindow
from soniq.validation import JobOptionsError

MAX_WINDOW_SECONDS = 366 * 86_400
"""The longest `unique_for`, `debounce` or `debounce_max_wait`: a year and a day."""
DEFAULT_MAX_WAIT_FACTOR = 10
"""Without `debounce_max_wait`, a debounced job starts at most this many `debounce` periods after
its first enqueue, so a steady stream of repeats cannot postpone it for ever."""
WINDOW_KEY_PREFIX = "window:"
DEBOUNCE_KEY_PREFIX = "debounce:"


def check_window_seconds(option: str, value: object) -> float | None:
    """`value` as seconds (None stays None), or `JobOptionsError` naming `option`."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise JobOptionsError(f"{option} must be a finite number of seconds above 0, got {value!r}")
    if not 0 < value <= MAX_WINDOW_SECONDS:
        raise JobOptionsError(
            f"{option} must be above 0 and at most {MAX_WINDOW_SECONDS} seconds (a year and a day), got {value!r}"
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class KeyTiming:
    """A job's `unique_for` or its `debounce` and `debounce_max_wait`, checked; never both."""

    unique_for: float | None = None
    debounce: float | None = None
    debounce_max_wait: float | None = None

    @classmethod
    def of(cls, *, unique_for: object = None, debounce: object = None, debounce_max_wait: object = None) -> KeyTiming:
        """The options checked together; an error names the option at fault."""
        window = check_window_seconds("unique_for", unique_for)
        delay = check_window_seconds("debounce", debounce)
        max_wait = check_window_seconds("debounce_max_wait", debounce_max_wait)
        if window is not None and delay is not None:
            raise JobOptionsError(
                "unique_for and debounce cannot be combined: a window keeps the first job and drops the "
                "repeats, debounce keeps one queued job and gives it the latest arguments; choose one"
            )
        if max_wait is not None and delay is None:
            raise JobOptionsError("debounce_max_wait needs debounce= (the delay each repeat pushes the start by)")
        if delay is not None:
            if max_wait is None:
                max_wait = min(delay * DEFAULT_MAX_WAIT_FACTOR, float(MAX_WINDOW_SECONDS))
            elif max_wait < delay:
                raise JobOptionsError(
                    f"debounce_max_wait ({max_wait:g} s) must be at least debounce ({delay:g} s): the first "
                    "start is already debounce seconds after the first enqueue"
                )
        return cls(unique_for=window, debounce=delay, debounce_max_wait=max_wait)

    @property
    def active(self) -> bool:
        return self.unique_for is not None or self.debounce is not None

    def apply(self, job: NewJob, key: str, now: datetime) -> NewJob:
        """`job` as stored under this timing: a window job loses its `dedup_key`, a debounced
        job takes `key` as its `dedup_key` and starts `debounce` seconds from `now`."""
        if self.unique_for is not None:
            window = UniqueWindow(key=key, starts_at=now, expires_at=now + timedelta(seconds=self.unique_for))
            return dataclasses.replace(job, dedup_key=None, unique_window=window)
        delay, max_wait = self.debounce or 0.0, self.debounce_max_wait or 0.0
        deadline = now + timedelta(seconds=max_wait)
        start = min(now + timedelta(seconds=delay), deadline)
        return dataclasses.replace(job, dedup_key=key, scheduled_at=start, debounce_deadline=deadline)


NO_TIMING = KeyTiming()


def timing_key(
    timing: KeyTiming,
    job_name: str,
    args: Mapping[str, Any],
    *,
    dedup_key: str | None,
    signature: inspect.Signature | None,
) -> str:
    """The key a window or debounce holds: `dedup_key` when given, else the job's name with a
    digest of its bound arguments in canonical JSON (the store sees only the digest)."""
    if dedup_key is not None:
        return dedup_key
    prefix = WINDOW_KEY_PREFIX if timing.unique_for is not None else DEBOUNCE_KEY_PREFIX
    canonical = _canonical(_bound(args, signature))
    digest = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{prefix}{job_name}:{digest}"


def _bound(args: Mapping[str, Any], signature: inspect.Signature | None) -> Mapping[str, Any]:
    """`args` with the handler's defaults filled in, when they bind and the defaults are JSON."""
    if signature is None:
        return args
    try:
        bound = signature.bind(**args)
    except TypeError:
        return args
    bound.apply_defaults()
    filled = dict(args)
    for name, value in bound.arguments.items():
        parameter = signature.parameters[name]
        if name in filled or parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
            continue
        filled[name] = value
    try:
        _canonical(filled)
    except (TypeError, ValueError):
        return args  # a default that is not JSON (an object, a sentinel): key on what was given
    return filled


def _canonical(args: Mapping[str, Any]) -> str:
    return json.dumps(dict(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


__all__ = [
    "DEFAULT_MAX_WAIT_FACTOR",
    "MAX_WINDOW_SECONDS",
    "NO_TIMING",
    "KeyTiming",
    "check_window_seconds",
    "timing_key",
]
