"""Exponential backoff with full jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass


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
        ceiling = min(self.maximum, self.base * (2.0 ** min(attempts - 1, 62)))
        draw: float = (rng or random).random()
        return ceiling * (0.5 + 0.5 * draw)
