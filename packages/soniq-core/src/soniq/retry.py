"""Exponential backoff with full jitter, always finite and at most a year."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

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
