"""The worker's side of fleet-wide limits: what it passes to each claim, and when it claims again.

The store enforces every limit inside the claim (`ClaimJobsParams.limits`);
the worker only forwards the app's limits, read once as it starts, and must
not spin when a claim comes back short because rows were held back. It then
waits as for an empty queue (a wake-up or `poll_interval`), with two
exceptions that keep a limited group busy: a slot of its own freeing or an
outcome write landing wakes the claim loop at once (the run table's
`changed` event, as without limits), and with a rate limit the wait ends
just after the next window opens, since that is when held-back rows become
claimable. Without limits nothing here costs anything: the claim is the
plain one and the wait is the usual one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from soniq.params import GroupLimit

WINDOW_MARGIN_SECONDS = 0.005
"""Claim this long after a rate window opens, so that the store's clock, too, has moved into it."""


class ClaimLimits:
    """The limits one worker claims under, and how long it may wait after a short claim."""

    __slots__ = ("_periods", "limits")

    def __init__(self, limits: Sequence[GroupLimit]) -> None:
        self.limits: tuple[GroupLimit, ...] = tuple(limits)
        self._periods = tuple(sorted({limit.rate_period for limit in self.limits if limit.rate_limit is not None}))

    def __bool__(self) -> bool:
        return bool(self.limits)

    def wait_after_short_claim(self, poll_interval: float, *, now: float | None = None) -> float:
        """How long to wait for a wake-up after a claim that returned fewer rows than asked for.

        `poll_interval` as usual, cut short to just after the next rate window opens
        (windows are aligned to the Unix epoch)."""
        if not self._periods:
            return poll_interval
        at = time.time() if now is None else now
        until_next = min(next_window_in(period, at) for period in self._periods)
        return min(poll_interval, until_next + WINDOW_MARGIN_SECONDS)


def next_window_in(period: float, now: float) -> float:
    """Seconds from `now` until the next window of `period` seconds opens (windows start at multiples of it)."""
    boundary = math.floor(now / period + 1.0) * period
    return max(0.0, boundary - now)
