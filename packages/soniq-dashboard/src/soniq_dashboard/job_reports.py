"""What a running job reports, as its page shows it: its progress (`ctx.progress`) and its log (`ctx.logger`).

A handler writes both, so both may hold anything: markup, a URL's password, a terminal escape
sequence. Before a template sees them they are masked by `soniq.redaction` (as arguments and errors
are) and every control character but a log message's line breaks is written as an escape (``\\x1b``,
``\\r``); the templates' autoescaping then makes what is left plain text.

A store without the `JobProgressStore` role keeps no progress and one without `JobLogStore` no log:
the page says so instead of failing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from soniq.observers import printable, redact_text

LOG_ROLE = "JobLogStore"
PROGRESS_ROLE = "JobProgressStore"


def shown_line(text: str) -> str:
    """`text` as one masked, printable line (a line break shows as ``\\n``)."""
    return printable(redact_text(text))


def shown_lines(text: str) -> str:
    """`text` masked, its line breaks kept and every other control character written as an escape."""
    return "\n".join(printable(line) for line in redact_text(text).split("\n"))


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if value >= 0 else None


def number_text(value: int | float) -> str:
    """``12,500``; a fraction keeps its digits (``2.5``) and a whole float drops its ``.0``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}"


@dataclass(frozen=True, slots=True)
class ProgressView:
    done: int | float
    total: int | float | None
    """None when the handler gave no total: the page then shows the count without a bar."""
    message: str | None
    """Masked and printable (see the module's text)."""
    updated_at: datetime | None
    age: timedelta | None
    """How long before this read the value was stored."""

    @property
    def bar(self) -> bool:
        """Whether a bar can show it: a total above zero that `done` does not pass."""
        return self.total is not None and self.total > 0 and self.done <= self.total

    @property
    def percent(self) -> str:
        """``12.5%``, rounded down to a tenth, so a job one item short of done never shows 100%; or ``""``."""
        if not self.bar or self.total is None:
            return ""
        tenths = math.floor(self.done * 1000 / self.total) / 10
        return f"{tenths:g}%"

    @property
    def words(self) -> str:
        """``3 of 10 (30%)``, or ``3`` without a total."""
        if self.total is None:
            return number_text(self.done)
        text = f"{number_text(self.done)} of {number_text(self.total)}"
        return f"{text} ({self.percent})" if self.percent else text


def progress_view(value: Mapping[str, Any] | None, now: datetime | None = None) -> ProgressView | None:
    """`get_job()["progress"]` as the page shows it; None when there is none, or no `done` count in it."""
    if not isinstance(value, Mapping):
        return None
    done = _number(value.get("done"))
    if done is None:
        return None
    message = value.get("message")
    updated = value.get("updated_at")
    if isinstance(updated, str):
        try:
            updated = datetime.fromisoformat(updated)
        except ValueError:
            updated = None
    if isinstance(updated, datetime):
        updated = updated.replace(tzinfo=UTC) if updated.tzinfo is None else updated
        age: timedelta | None = max(timedelta(0), (now or datetime.now(UTC)) - updated)
    else:
        updated, age = None, None
    return ProgressView(
        done=done,
        total=_number(value.get("total")),
        message=shown_line(message) if isinstance(message, str) and message else None,
        updated_at=updated,
        age=age,
    )


@dataclass(frozen=True, slots=True)
class LogLine:
    at: datetime | None
    level: str
    message: str
    """Masked, line breaks kept, other control characters escaped (see the module's text)."""


@dataclass(frozen=True, slots=True)
class JobLog:
    lines: list[LogLine] = field(default_factory=list)
    """Oldest first, as `app.get_job_logs` returns them; a dropped-records marker is the first line."""
    missing_role: str | None = None
    """``JobLogStore`` when the backend keeps no job logs; else None."""


def job_log(records: Sequence[Mapping[str, Any]]) -> JobLog:
    """`app.get_job_logs(...)` as the page shows it."""
    return JobLog(
        lines=[
            LogLine(
                at=record.get("at") if isinstance(record.get("at"), datetime) else None,
                level=shown_line(str(record.get("level") or "")),
                message=shown_lines(str(record.get("message") or "")),
            )
            for record in records
        ]
    )
