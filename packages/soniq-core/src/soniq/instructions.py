"""What a handler tells the worker to do instead of finishing: `Snooze` (run me later) and
`Permanent` (give me up now). They are instructions, not errors, so they derive from neither
`SoniqError` nor each other; `soniq.errors` re-exports both under their old names."""

from __future__ import annotations

import math

SNOOZE_MAX_SECONDS = 30 * 86400.0
"""The longest a `Snooze` puts a job off (30 days) unless the app sets `snooze_max_seconds`."""


class Snooze(Exception):  # noqa: N818 - returned or raised by handlers, reads as an instruction
    """Return (as in soniq 0.1.0) or raise from a handler to run the job again later.

    The attempt count stays as it was. The delay must be a finite number of
    seconds >= 0; a longer one than the `snooze_max_seconds` setting (default
    30 days) is cut down to it. `reason` is kept for logs and observers.
    """

    def __init__(self, seconds: float, reason: str | None = None) -> None:
        try:
            value = float(seconds)
        except (TypeError, ValueError):
            raise ValueError(f"Snooze seconds must be a finite number >= 0, got {seconds!r}") from None
        # NaN fails every comparison, so it is rejected by name rather than by `< 0`.
        if math.isnan(value) or math.isinf(value) or value < 0:
            raise ValueError(f"Snooze seconds must be a finite number >= 0, got {seconds!r}")
        if reason is not None and not isinstance(reason, str):
            raise ValueError(f"Snooze reason must be a string or None, got {reason!r}")
        self.seconds = value
        self.reason = reason
        super().__init__(f"snoozed for {value:g}s" + (f" ({reason})" if reason else ""))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snooze):
            return NotImplemented
        return (self.seconds, self.reason) == (other.seconds, other.reason)

    def __hash__(self) -> int:
        return hash((Snooze, self.seconds, self.reason))

    def __repr__(self) -> str:
        return f"Snooze(seconds={self.seconds!r}, reason={self.reason!r})"


class Permanent(Exception):  # noqa: N818 - raised by handlers, reads as an instruction
    """Raise from a handler to give the job up now: it moves to the dead-letter table with
    reason ``non_retryable`` whatever retries it has left. ``raise Permanent("why") from exc``
    keeps the original error's traceback in `last_error`."""
