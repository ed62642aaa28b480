"""Exponential backoff with full jitter, always finite and at most a year."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from soniq.registry import JobDefinition

MAX_DELAY_SECONDS = 365 * 86400.0
"""No computed delay goes past a year: a date further out overflows some stores' timestamps."""


def bounded_delay(seconds: float, *, maximum: float = MAX_DELAY_SECONDS) -> float:
    """`seconds` as a finite delay in [0, maximum]; NaN counts as no delay."""
    if math.isnan(seconds):
        return 0.0
    return min(max(seconds, 0.0), maximum, MAX_DELAY_SECONDS)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    base: float = 1.0
    maximum: float = 300.0

    def delay(self, attempts: int, *, rng: random.Random | None = None) -> float:
        """Seconds before the next run after `attempts` counted runs (>= 1).

        The ceiling doubles per attempt up to `maximum`; the delay is drawn
        between half the ceiling and the ceiling so that a burst of failures
        does not come back in lockstep.
        """
        if attempts < 1:
            attempts = 1
        try:
            ceiling = min(self.maximum, self.base * (2.0 ** min(attempts - 1, 62)))
        except OverflowError:
            ceiling = self.maximum
        draw: float = (rng or random).random()
        return bounded_delay(ceiling * (0.5 + 0.5 * draw))


# -- per-job retry options and `Soniq(retry_policy=...)`, as in soniq 0.1.0 --


@runtime_checkable
class AppRetryPolicy(Protocol):
    """``Soniq(retry_policy=obj)``: seconds before the next run, or None to dead-letter now.

    `attempt` is the 1-based number of the run that just failed, `job_meta`
    the job's options as a dict (``retry_delay``, ``retry_backoff``,
    ``max_retries``, ...), `exc` the exception it raised.
    """

    def delay_for(self, *, attempt: int, job_meta: dict[str, Any], exc: BaseException) -> float | None: ...


RetryDelay = float | Sequence[float]


def per_job_delay(
    *,
    attempt: int,
    retry_delay: RetryDelay | None,
    retry_backoff: bool,
    retry_max_delay: float | None,
    retry_jitter: bool,
    rng: random.Random | None = None,
) -> float:
    """The delay a job's own retry options give (0.1.0's rules).

    A list is indexed by attempt (its last entry repeats); `retry_backoff`
    doubles the base (1s when it is 0) per attempt; `retry_max_delay` caps
    it; `retry_jitter` (with backoff only) draws between half and all of it.
    """
    attempt = max(attempt, 1)
    if retry_delay is None:
        delay = 0.0
    elif isinstance(retry_delay, (int, float)):
        delay = float(retry_delay)
    else:
        delays = list(retry_delay)
        delay = float(delays[min(attempt - 1, len(delays) - 1)]) if delays else 0.0
    if retry_backoff:
        delay = (delay if delay > 0 else 1.0) * (2.0 ** min(attempt - 1, 62))
    if retry_max_delay is not None:
        delay = min(delay, float(retry_max_delay))
    if retry_backoff and retry_jitter and delay > 0:
        delay = (rng or random).uniform(delay / 2.0, delay)
    return bounded_delay(delay)


class JobRetryDelays:
    """Chooses the delay of one failed run: the app's `retry_policy` when it has one, else the
    job's own retry options when it set any, else the settings' backoff (`retry_backoff_base`/`_max`)."""

    def __init__(self, default: RetryPolicy, app_policy: AppRetryPolicy | None = None) -> None:
        self.default = default
        self.app_policy = app_policy

    def delay_for(self, definition: JobDefinition | None, attempt: int, exc: BaseException) -> float | None:
        if self.app_policy is not None:
            meta = definition.job_meta() if definition is not None else {}
            chosen = self.app_policy.delay_for(attempt=attempt, job_meta=meta, exc=exc)
            if chosen is None:
                return None
            if isinstance(chosen, bool) or not isinstance(chosen, (int, float)):
                raise TypeError(f"retry_policy.delay_for returned {chosen!r}; expected seconds (a number) or None")
            return bounded_delay(float(chosen))
        if definition is not None and definition.retry_options_set:
            return per_job_delay(
                attempt=attempt,
                retry_delay=definition.retry_delay,
                retry_backoff=definition.retry_backoff,
                retry_max_delay=definition.retry_max_delay,
                retry_jitter=definition.retry_jitter,
            )
        return self.default.delay(attempt)


def check_app_retry_policy(policy: object) -> None:
    """`Soniq(retry_policy=...)` must have a callable `delay_for`."""
    if policy is not None and not callable(getattr(policy, "delay_for", None)):
        raise TypeError(
            f"retry_policy must be an object with a delay_for(*, attempt, job_meta, exc) method, got {policy!r}"
        )
