"""What the CLI prints: job data made safe for a terminal, and the log format.

Names, queues, error texts and arguments come from whoever enqueued the job.
Printed raw, an ANSI escape in them could rewrite the operator's screen or
hide a line, so every such value goes through `safe` before it is printed.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime

from soniq.redaction import redact_text

# C0 controls, DEL, C1 controls, and the bidirectional overrides that can reorder a line.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_KEEP_NEWLINES = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(value: object) -> str:
    """`value` as one printable line: control characters shown as ``\\x1b``, ``\\n`` and so on."""
    return _UNSAFE.sub(_escape, str(value))


def safe_block(value: object) -> str:
    """Like `safe` but keeps line breaks, for tracebacks."""
    return _UNSAFE_KEEP_NEWLINES.sub(_escape, str(value))


def message(value: object) -> str:
    """A value for a one-line error: password masked, control characters escaped."""
    return safe(redact_text(str(value)))


class SafeFormatter(logging.Formatter):
    """The worker's log lines with job data escaped and passwords masked.

    A log line's message may carry a job's name or error text; the traceback
    keeps its line breaks but loses every other control character.
    """

    def format(self, record: logging.LogRecord) -> str:
        if not record.exc_text:
            return super().format(record)
        # A traceback formatted before this formatter saw the record (by a logger's filter): made safe here
        # too, and only for this output: the record is shared with every other handler.
        kept = record.exc_text
        record.exc_text = safe_block(redact_text(kept))
        try:
            return super().format(record)
        finally:
            record.exc_text = kept

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        return safe(redact_text(super().formatMessage(record)))

    def formatException(self, ei: object) -> str:  # noqa: N802 - logging's name
        return safe_block(redact_text(super().formatException(ei)))  # type: ignore[arg-type]

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 - logging's name
        return safe_block(redact_text(super().formatStack(stack_info)))


def heartbeat_age(last_heartbeat: datetime, *, now: datetime | None = None) -> float:
    """Seconds since `last_heartbeat`, never negative (clocks of two hosts may disagree a little)."""
    now = now or datetime.now(UTC)
    if last_heartbeat.tzinfo is None:
        last_heartbeat = last_heartbeat.replace(tzinfo=UTC)
    return max(0.0, (now - last_heartbeat).total_seconds())


def format_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"
