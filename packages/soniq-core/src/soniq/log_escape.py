"""Log lines that carry job data print it escaped, whatever handler the application installed.

A job's error text, a job name read from a row, a schedule's name: any of them may hold an
escape sequence that rewrites a terminal, or a line break that forges a log line. The CLI's
handler escapes them, but an application that runs ``app.run_worker()`` under its own
``logging`` setup printed them raw. `EscapeControls` rewrites the message of every record of
Soniq's worker-side loggers once, before any handler sees it: control characters (line breaks
included) and bidirectional overrides become ``\\x1b``, ``\\n``, ``\\u202e``. A record's
traceback keeps its line breaks, with every other control character escaped.
"""

from __future__ import annotations

import logging
import re
import traceback

from soniq.redaction import redact_text
from soniq.serialization import printable_lines, safe_text

__all__ = ["ESCAPED_LOGGERS", "EscapeControls", "escape_line", "install"]

ESCAPED_LOGGERS = (
    "soniq",
    "soniq.worker",
    "soniq.jobs",
    "soniq.job_log",
    "soniq.scheduler",
    "soniq.leader",
    "soniq.hooks",
    "soniq.bus",
    "soniq.metrics",
    "soniq.waiting",
    "soniq.producer",
    "soniq_prometheus",
)
"""Loggers whose lines can carry a job's name, queue, arguments or error text (a logger's filters
see only the records logged on it, so each is named)."""

_LINE_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069]")
_NAMED = {9: "\\t", 10: "\\n", 13: "\\r"}


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return _NAMED.get(code) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def escape_line(text: str) -> str:
    """`text` as one printable line: every control character, line breaks included, written as an escape."""
    return safe_text(_LINE_CONTROLS.sub(_escape, text))


class EscapeControls(logging.Filter):
    """Escapes the formatted message (and formats the traceback, escaped) of every record it sees."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True  # a broken format string: logging reports it as it always has
        if _LINE_CONTROLS.search(message) is not None:
            record.msg = escape_line(message)
            record.args = None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            _, value, tb = record.exc_info
            try:
                text = "".join(traceback.format_exception(type(value), value, tb)).rstrip("\n")
                record.exc_text = printable_lines(redact_text(text))
            except Exception:
                pass
        return True


_FILTER = EscapeControls()


def install() -> None:
    """Put the filter on every logger of `ESCAPED_LOGGERS` (once; calling again changes nothing)."""
    for name in ESCAPED_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
