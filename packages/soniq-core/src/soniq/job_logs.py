"""Job logs: `ctx.logger`, a `logging`-compatible adapter whose records are stored with the job
(role `JobLogStore`) and read back with `app.get_job_logs(job_id)`.

Every rule is here, in core: the stored format (a JSON list of ``{"at", "level", "message"}``,
``at`` an ISO 8601 UTC time), the cap (`job_log_max_bytes` of that JSON; the oldest records
are dropped first and a marker record says how many), and when to write (coalesced, at most
`LOG_INTERVAL` apart, and once when the run ends). A backend stores the text it is given.

Every run of one job id appends to the same log: the first write of a run reads what earlier
runs stored. Records may come from the handler's thread (a plain ``def`` handler); they are
buffered under a lock and written from the worker's event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import threading
import traceback
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from soniq.backend import JobLogStore, require_role
from soniq.coalesce import CoalescedWriter
from soniq.decoding import decode_json
from soniq.params import GetJobLogsParams, SaveJobLogsParams

__all__ = [
    "LOG_INTERVAL",
    "JobLogBook",
    "JobLogger",
    "decode_job_logs",
    "encode_job_logs",
    "log_entry",
    "trim_job_logs",
]

worker_logger = logging.getLogger("soniq.worker")

FEATURE = "job logs (ctx.logger)"

FORWARD_LOGGER = "soniq.job_log"
"""The standard logger `ctx.logger` also writes each record to (with the job's id in front)."""

LOG_INTERVAL = 0.5
"""Seconds between two writes of one run's log."""

_MARKER = re.compile(r"^\[soniq\] (\d+) earlier log records? dropped")
_TRUNCATED = " [truncated by soniq]"


def log_entry(level: int, message: str, at: datetime | None = None) -> dict[str, str]:
    """One stored record. Text no store can keep is replaced: NUL by ``\\x00``, a lone surrogate by ``?``."""
    text = message.replace("\x00", "\\x00").encode("utf-8", "replace").decode("utf-8")
    return {
        "at": (at or datetime.now(UTC)).isoformat(),
        "level": logging.getLevelName(level),
        "message": text,
    }


def _size(entry: Mapping[str, Any]) -> int:
    """Bytes `entry` takes in the encoded list, with its separating comma."""
    return len(json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8")) + 1


def _marker(dropped: int, at: str, max_bytes: int) -> dict[str, str]:
    noun = "record" if dropped == 1 else "records"
    return {
        "at": at,
        "level": "WARNING",
        "message": f"[soniq] {dropped} earlier log {noun} dropped to stay within job_log_max_bytes={max_bytes}",
    }


def _truncate(entry: dict[str, str], room: int) -> dict[str, str]:
    """`entry` with its message cut so that the entry takes at most `room` bytes (and says so)."""
    message = entry["message"]
    over = _size(entry) - room
    if over <= 0:
        return entry
    keep = max(len(message) - over - len(_TRUNCATED) - 8, 0)
    while keep > 0:
        cut = {**entry, "message": message[:keep] + _TRUNCATED}
        if _size(cut) <= room:
            return cut
        keep -= max((_size(cut) - room) // 2, 1)
    return {**entry, "message": _TRUNCATED.strip()}


def trim_job_logs(entries: list[dict[str, str]], max_bytes: int) -> list[dict[str, str]]:
    """`entries` cut to fit `max_bytes` of encoded JSON: the oldest records go first, and a marker
    record in front counts every record dropped so far (an earlier marker's count included). A
    single record too large on its own keeps its start, marked as truncated."""
    if len(encode_job_logs(entries).encode("utf-8")) <= max_bytes:
        return entries
    dropped = 0
    rest = list(entries)
    if rest and (match := _MARKER.match(rest[0].get("message", ""))):
        dropped = int(match.group(1))
        rest = rest[1:]
    budget = max_bytes - 2  # the brackets
    kept: list[dict[str, str]] = []
    used = 0
    for entry in reversed(rest):
        size = _size(entry)
        if used + size > budget:
            break
        kept.append(entry)
        used += size
    kept.reverse()
    dropped += len(rest) - len(kept)
    at = kept[0]["at"] if kept else (rest[-1]["at"] if rest else datetime.now(UTC).isoformat())
    marker = _marker(dropped, at, max_bytes)
    while kept and used + _size(marker) > budget:
        used -= _size(kept.pop(0))
        dropped += 1
        marker = _marker(dropped, kept[0]["at"] if kept else at, max_bytes)
    if not kept and rest:
        # The newest record alone does not fit beside the marker: keep its start.
        newest = _truncate(rest[-1], budget - _size(marker))
        if _size(newest) + _size(marker) <= budget:
            return [marker, newest]
    return [marker, *kept]


def encode_job_logs(entries: Iterable[Mapping[str, Any]]) -> str:
    """The stored text of a log."""
    return json.dumps(list(entries), ensure_ascii=False, separators=(",", ":"))


def decode_job_logs(text: str | None) -> list[dict[str, Any]]:
    """A stored log as `get_job_logs` returns it: ``at`` a datetime. A stored value that is not a
    log (corrupt text) comes back as one ERROR record saying so, never as an exception."""
    if text is None:
        return []
    value, problem = decode_json(text, "logs")
    if problem is None and not isinstance(value, list):
        problem = "logs: stored JSON is not a list"
    if problem is not None:
        return [{"at": None, "level": "ERROR", "message": f"[soniq] the stored log cannot be read: {problem}"}]
    records: list[dict[str, Any]] = []
    for item in value:
        if not isinstance(item, dict):
            continue
        stamp = item.get("at")
        try:
            at: datetime | None = datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
        except ValueError:
            at = None
        records.append({"at": at, "level": str(item.get("level", "")), "message": str(item.get("message", ""))})
    return records


def _raw_entries(text: str | None) -> list[dict[str, str]]:
    """A stored log as stored entries (for appending), dropping what is not an entry."""
    if text is None:
        return []
    value, problem = decode_json(text, "logs")
    if problem is not None or not isinstance(value, list):
        return [log_entry(logging.ERROR, "[soniq] an earlier run's stored log could not be read and was replaced")]
    return [
        {"at": str(item.get("at", "")), "level": str(item.get("level", "")), "message": str(item.get("message", ""))}
        for item in value
        if isinstance(item, dict)
    ]


class JobLogBook:
    """One run's log: the records of earlier runs (read at the first write) and this run's, written
    coalesced. `add` may be called from any thread."""

    def __init__(
        self,
        *,
        backend: object | None,
        job_id: str,
        worker_id: str,
        max_bytes: int,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._store: JobLogStore | None = None
        if backend is not None:
            protocol: Any = JobLogStore  # a protocol class in the call trips mypy's type-abstract check
            self._store = require_role(backend, protocol, FEATURE)
        self._job_id = job_id
        self._worker_id = worker_id
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: list[dict[str, str]] = []
        self._loaded = self._store is None
        self._lost = False
        self._loop = loop
        """The worker's loop, where writes run (None: records stay in this object, as in a test)."""
        if loop is None:
            self._store = None
        self._writer = CoalescedWriter(self._write, LOG_INTERVAL)

    @property
    def entries(self) -> list[dict[str, str]]:
        """The records held for this run (earlier runs' too, once loaded), as stored."""
        with self._lock:
            return list(self._entries)

    def add(self, level: int, message: str) -> None:
        entry = log_entry(level, message)
        with self._lock:
            self._entries.append(entry)
            if len(self._entries) % 64 == 0:  # a tight loop: keep memory bounded between writes
                self._entries = trim_job_logs(self._entries, self._max_bytes)
        loop = self._loop
        if self._store is None or self._lost or loop is None:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._writer.mark()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(self._writer.mark)

    async def _write(self) -> None:
        store = self._store
        if store is None or self._lost:
            return
        try:
            if not self._loaded:
                earlier = _raw_entries(await store.get_job_logs(GetJobLogsParams(job_id=self._job_id)))
                with self._lock:
                    self._entries = earlier + self._entries
                self._loaded = True
            with self._lock:
                self._entries = trim_job_logs(self._entries, self._max_bytes)
                text = encode_job_logs(self._entries)
            written = await store.save_job_logs(
                SaveJobLogsParams(job_id=self._job_id, worker_id=self._worker_id, logs_json=text)
            )
        except Exception:
            worker_logger.warning("job %s: its log could not be stored", self._job_id, exc_info=True)
            return
        if not written:
            self._lost = True
            worker_logger.warning(
                "job %s: log not stored, worker %s no longer owns the row; later records are not stored",
                self._job_id,
                self._worker_id,
            )

    async def close(self) -> None:
        """Write what is not stored yet."""
        await self._writer.flush()


class JobLogger(logging.LoggerAdapter[logging.Logger]):
    """`ctx.logger`: log as with any `logging.Logger`. Each record at INFO or above (or at any
    level the ``soniq.job_log`` logger is enabled for) is stored with the job, and every record
    the ``soniq.job_log`` logger is enabled for also goes to it, after ``job <id> (<name>):``."""

    def __init__(self, book: JobLogBook, *, job_id: str, job_name: str) -> None:
        super().__init__(logging.getLogger(FORWARD_LOGGER), {"soniq_job_id": job_id, "soniq_job_name": job_name})
        self._book = book
        self._prefix = f"job {job_id} ({job_name}): "

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 - logging's name
        return level >= logging.INFO or self.logger.isEnabledFor(level)

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if not isinstance(level, int) or not self.isEnabledFor(level):
            return
        text = str(msg)
        if args:
            try:
                text = text % args
            except (TypeError, ValueError, KeyError):
                text = f"{text} {args!r}"
        details = _exception_text(kwargs.get("exc_info"))
        self._book.add(level, f"{text}\n{details}" if details else text)
        if self.logger.isEnabledFor(level):
            extra = {**(self.extra or {}), **(kwargs.get("extra") or {})}
            self.logger.log(
                level,
                "%s%s",
                self._prefix,
                text,
                exc_info=kwargs.get("exc_info"),
                stack_info=kwargs.get("stack_info", False),
                stacklevel=kwargs.get("stacklevel", 1) + 1,
                extra=extra,
            )


def _exception_text(exc_info: object) -> str:
    """The traceback `exc_info` (as `logging` takes it) names, or ``""``."""
    if not exc_info:
        return ""
    if isinstance(exc_info, BaseException):
        return "".join(traceback.format_exception(exc_info)).rstrip()
    info = sys.exc_info() if exc_info is True else exc_info
    if isinstance(info, tuple) and len(info) == 3 and info[1] is not None:
        return "".join(traceback.format_exception(info[1])).rstrip()
    return ""
