"""`ctx.progress(done, total=None, message=None)`: how far a running job has got, stored with the
job (role `JobProgressStore`) and read back in `get_job()["progress"]`.

A handler may report progress in a tight loop: every call replaces the value held for the run,
and `CoalescedWriter` stores it at most `PROGRESS_INTERVAL` apart, plus once when the run ends.
Bad values are refused in the handler, at the call, with `ProgressValueError`.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from soniq.backend import JobProgressStore, require_role
from soniq.coalesce import CoalescedWriter
from soniq.encryption import SHOWN
from soniq.errors import ProgressValueError
from soniq.params import SaveProgressParams

__all__ = ["MAX_PROGRESS_MESSAGE_CHARS", "PROGRESS_INTERVAL", "JobProgress", "progress_value"]

logger = logging.getLogger("soniq.worker")

FEATURE = "job progress (ctx.progress)"

PROGRESS_INTERVAL = 0.25
"""Seconds between two stored progress values of one run (at most four writes a second)."""

MAX_PROGRESS_MESSAGE_CHARS = 1000
"""The longest progress message, in characters."""

_LARGEST = 1e15
"""`done` and `total` stay below this, so every store and JSON reader keeps them exactly."""


def _number(name: str, value: object) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProgressValueError(f"progress {name} must be a number, got {type(value).__name__} {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ProgressValueError(f"progress {name} must be finite, got {value!r}")
    if not 0 <= value <= _LARGEST:
        raise ProgressValueError(f"progress {name} must be from 0 to {_LARGEST:.0e}, got {value!r}")
    return value


def _message(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ProgressValueError(f"progress message must be a string or None, got {type(value).__name__}")
    if len(value) > MAX_PROGRESS_MESSAGE_CHARS:
        raise ProgressValueError(
            f"progress message is {len(value)} characters, over the limit of {MAX_PROGRESS_MESSAGE_CHARS}"
        )
    if "\x00" in value:
        raise ProgressValueError("progress message contains a NUL character (U+0000), which stores cannot keep")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ProgressValueError(
            f"progress message contains a lone surrogate ({value[exc.start : exc.end]!a}), which stores cannot keep"
        ) from None
    return value


def progress_value(done: object, total: object = None, message: object = None) -> dict[str, Any]:
    """The progress object a store keeps, or `ProgressValueError` naming the bad part.

    `done` is a number from 0 up; `total`, when given, a number from 0 up that `done` may not
    exceed; `message` at most 1,000 characters of storable text."""
    value_done = _number("done", done)
    value_total = None if total is None else _number("total", total)
    if value_total is not None and value_done > value_total:
        raise ProgressValueError(f"progress done ({value_done!r}) is above total ({value_total!r})")
    return {
        "done": value_done,
        "total": value_total,
        "message": _message(message),
        "updated_at": datetime.now(UTC).isoformat(),
    }


class JobProgress:
    """The progress of one run of one job: the latest value, written coalesced."""

    def __init__(
        self,
        *,
        backend: object | None,
        job_id: str,
        worker_id: str,
        on_stored: Callable[[dict[str, Any]], None] | None = None,
        seal_text: Callable[[str], str] | None = None,
    ) -> None:
        self._store: JobProgressStore | None = None
        if backend is not None:
            protocol: Any = JobProgressStore  # a protocol class in the call trips mypy's type-abstract check
            self._store = require_role(backend, protocol, FEATURE)
        self._job_id = job_id
        self._worker_id = worker_id
        self._on_stored = on_stored
        self._seal_text = seal_text
        """An encrypted job's: its message is stored sealed, and observers see ``"encrypted"``."""
        self._writer = CoalescedWriter(self._write, PROGRESS_INTERVAL)
        self._lost = False
        self.value: dict[str, Any] | None = None
        """The last value reported in this run."""

    def report(self, done: object, total: object = None, message: object = None) -> None:
        self.value = progress_value(done, total, message)
        if self._store is not None and not self._lost:
            self._writer.mark()

    async def _write(self) -> None:
        value, store = self.value, self._store
        if value is None or store is None or self._lost:
            return
        if self._seal_text is not None and value.get("message") is not None:
            text = json.dumps({**value, "message": self._seal_text(value["message"])}, separators=(",", ":"))
            value = {**value, "message": SHOWN}
        else:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        try:
            written = await store.save_progress(
                SaveProgressParams(job_id=self._job_id, worker_id=self._worker_id, progress_json=text)
            )
        except Exception:
            logger.warning("job %s: its progress could not be stored", self._job_id, exc_info=True)
            return
        if not written:
            self._lost = True
            logger.warning(
                "job %s: progress not stored, worker %s no longer owns the row; later progress is dropped",
                self._job_id,
                self._worker_id,
            )
            return
        if self._on_stored is not None:
            self._on_stored(value)

    async def close(self) -> None:
        """Store the last value now, if it is not stored yet."""
        await self._writer.flush()
