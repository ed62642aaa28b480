"""Checks every producer value passes in core, before any store sees it.

Backends differ in what they reject and how (a driver error quoting the whole
arguments, a "store unreachable", or silent acceptance), so core decides once
and the same value fails the same way on every backend, with nothing stored.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from soniq.errors import JobArgumentsError
from soniq.errors import JobOptionsError as JobOptionsError

MAX_ARGS_DEPTH = 64
"""Deepest nesting of lists and dicts accepted in job arguments (the top-level dict is level 1)."""

MAX_QUEUE_NAME_BYTES = 200
PRIORITY_MIN = -(2**31)
PRIORITY_MAX = 2**31 - 1
SCHEDULE_MIN = datetime(1970, 1, 1, tzinfo=UTC)
SCHEDULE_MAX = datetime(9999, 12, 31, tzinfo=UTC)

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


MIN_JOB_TIMEOUT = 0.001
"""The shortest job timeout, 1 ms: `@app.job(timeout=)` and the `job_timeout` setting."""
MAX_JOB_TIMEOUT = 30 * 86400.0
"""The longest job timeout, 30 days: far below what the event loop's and threads' waits take."""


def check_job_timeout(timeout: object, *, what: str = "timeout") -> float | None:
    """`timeout` as seconds (None: no deadline) if it is a finite number from `MIN_JOB_TIMEOUT` to
    `MAX_JOB_TIMEOUT`; NaN, an infinity, zero, a negative or a huge number is `JobOptionsError`."""
    if timeout is None:
        return None
    bounds = f"from {MIN_JOB_TIMEOUT:g} to {MAX_JOB_TIMEOUT:,.0f} seconds (30 days)"
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise JobOptionsError(f"{what} must be None or a number of seconds {bounds}, got {type(timeout).__name__}")
    try:
        seconds = float(timeout)
    except OverflowError:  # an int too large for a float
        seconds = math.inf
    if not (math.isfinite(seconds) and MIN_JOB_TIMEOUT <= seconds <= MAX_JOB_TIMEOUT):
        shown = (
            repr(timeout)
            if isinstance(timeout, float) or abs(timeout) < 10**30
            else f"an int of {timeout.bit_length()} bits"
        )
        raise JobOptionsError(f"{what} must be None or a number of seconds {bounds}, got {shown}")
    return seconds


def check_queue_name(queue: object, *, what: str = "queue") -> str:
    """`queue` if every backend and ``--queues`` can serve it, else `JobOptionsError` saying why."""
    if not isinstance(queue, str):
        raise JobOptionsError(f"{what} must be a string, got {type(queue).__name__}")
    if not queue:
        raise JobOptionsError(f"{what} must not be empty")
    if queue != queue.strip():
        raise JobOptionsError(f"{what} {queue!r} has leading or trailing spaces, which `--queues` cannot match")
    if "," in queue:
        raise JobOptionsError(f"{what} {queue!r} contains ',', which `--queues a,b` uses to separate names")
    for char in queue:
        if unicodedata.category(char) in ("Cc", "Cs"):
            kind = "a lone surrogate" if unicodedata.category(char) == "Cs" else "a control character"
            raise JobOptionsError(f"{what} {queue!r} contains {kind} (U+{ord(char):04X})")
    size = len(queue.encode("utf-8"))
    if size > MAX_QUEUE_NAME_BYTES:
        raise JobOptionsError(f"{what} is {size} bytes in UTF-8, over the limit of {MAX_QUEUE_NAME_BYTES} bytes")
    return queue


def check_priority(priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise JobOptionsError(f"priority must be a whole number, got {priority!r}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise JobOptionsError(f"priority must be between {PRIORITY_MIN} and {PRIORITY_MAX}, got {priority}")
    return priority


def resolve_scheduled_at(value: object, *, now: datetime | None = None) -> datetime:
    """A datetime (naive means UTC), a timedelta from now, or seconds from now, within 1970..9999."""
    now = now or datetime.now(UTC)
    if value is None:
        return now
    if isinstance(value, bool):
        raise JobOptionsError(f"scheduled_at must be a datetime, timedelta or seconds, got {value!r}")
    try:
        if isinstance(value, datetime):
            when = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        elif isinstance(value, timedelta):
            when = now + value
        elif isinstance(value, (int, float)):
            if isinstance(value, float) and not math.isfinite(value):
                raise JobOptionsError(f"scheduled_at must be a finite number of seconds, got {value!r}")
            when = now + timedelta(seconds=float(value))
        else:
            raise JobOptionsError(f"scheduled_at must be a datetime, timedelta or seconds, got {type(value).__name__}")
    except (OverflowError, ValueError) as exc:
        if isinstance(exc, JobOptionsError):
            raise
        raise JobOptionsError(f"scheduled_at {value!r} is out of range (between 1970 and 9999 UTC)") from None
    if not SCHEDULE_MIN <= when <= SCHEDULE_MAX:
        raise JobOptionsError(f"scheduled_at {value!r} is out of range (between 1970 and 9999 UTC)")
    return when


MAX_PAGE_LIMIT = 10_000
"""The most rows one listing call returns (`list_jobs`, `dead_letter.list`): `limit` is 1 to this."""
MAX_OFFSET = 1_000_000_000
"""The largest `offset` a listing takes; far past any real page, and inside every store's integers."""
MAX_FILTER_LIMIT = 1_000_000
"""The largest `DeadLetterFilter.limit` (it caps bulk replays and deletes, done in batches)."""
MAX_ID_LENGTH = 255
"""The longest job id a read looks up; ids Soniq makes are 36 characters, and a longer one is not found."""


def _shown(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"an int of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_count(value: object, *, what: str, low: int, high: int) -> int:
    """`value` if it is a whole number from `low` to `high`, else `JobOptionsError` naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise JobOptionsError(f"{what} must be a whole number from {low:,} to {high:,}, got {_shown(value)}")
    return value


def check_page(limit: object, offset: object) -> tuple[int, int]:
    """The same error for a bad listing page on every backend: `limit` 1 to `MAX_PAGE_LIMIT`,
    `offset` 0 to `MAX_OFFSET` (``limit=2**63`` reached the driver)."""
    return (
        check_count(limit, what="limit", low=1, high=MAX_PAGE_LIMIT),
        check_count(offset, what="offset", low=0, high=MAX_OFFSET),
    )


def storable_text(text: str) -> bool:
    """True when every store holds `text` as the same key: no NUL, no lone surrogate.

    Cheap on the hot path: one `in` and, for non-ASCII text only, one encode."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def lookup_id(job_id: object) -> str | None:
    """The id a read or by-id call passes to the store, or None when no stored row can have it
    (NUL, a lone surrogate, longer than `MAX_ID_LENGTH`): the caller answers "not found" without
    asking the store, as for any unknown id."""
    text = job_id if isinstance(job_id, str) else str(job_id)
    if len(text) > MAX_ID_LENGTH or not storable_text(text):
        return None
    return text


def lookup_name(name: object) -> str | None:
    """A schedule name to look up, or None when no stored schedule can have it (not a string, NUL,
    a lone surrogate): "not found"."""
    if not isinstance(name, str) or not storable_text(name):
        return None
    return name


def check_filter_text(value: object, *, what: str) -> str:
    """A filter value (a job name, a dead-letter reason) every store matches the same way, else
    `JobOptionsError` naming `what`: a NUL or a lone surrogate cannot be stored, so it cannot match."""
    if not isinstance(value, str):
        raise JobOptionsError(f"{what} must be a string, got {type(value).__name__}")
    if not storable_text(value):
        kind = "a NUL character" if "\x00" in value else "a lone surrogate"
        raise JobOptionsError(f"{what} {_shown(value)} contains {kind}, which no store holds")
    return value


def check_queue_filter(queue: object, *, what: str = "queue") -> str | None:
    """A queue to filter a read by (None: every queue): what enqueue accepts (`check_queue_name`),
    so reads and writes agree on which names can exist."""
    return None if queue is None else check_queue_name(queue, what=what)


def _path(parts: list[str | int]) -> str:
    return "args" + "".join(f"[{part!r}]" for part in parts)


def _find_problem(args: Mapping[str, Any]) -> str | None:
    """What is wrong with `args` and where, walking without recursion (a 5,000-deep value is fine to walk)."""
    stack: list[tuple[Any, list[str | int]]] = [(args, [])]
    while stack:
        value, path = stack.pop()
        if len(path) >= MAX_ARGS_DEPTH and isinstance(value, (dict, list, tuple)):
            return f"{_path(path[:3])}... is nested more than {MAX_ARGS_DEPTH} levels deep"
        if isinstance(value, str):
            problem = _text_problem(value)
            if problem:
                return f"{_path(path)} contains {problem}"
        elif isinstance(value, float):
            if not math.isfinite(value):
                return f"{_path(path)} is {value!r}, which JSON cannot carry"
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    # JSON turns these into strings itself; anything else cannot be a key.
                    if key is not None and not isinstance(key, (int, float)):
                        return f"{_path(path)} has a key of type {type(key).__name__}; keys must be str"
                    key = str(key)
                problem = _text_problem(key)
                if problem or "\x00" in key:
                    return f"{_path(path)} has a key that contains {problem or 'a NUL character'}"
                stack.append((item, [*path, key]))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, [*path, index]) for index, item in enumerate(value))
        elif value is not None and not isinstance(value, (bool, int)):
            return f"{_path(path)} is of type {type(value).__name__}, which is not JSON"
    return None


def _text_problem(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate (U+{ord(text[exc.start]):04X})"
    return None


def encode_args(job_name: str, args: Mapping[str, Any], *, max_bytes: int) -> tuple[dict[str, Any], str]:
    """`args` as a plain dict and compact JSON text, or `JobArgumentsError` naming the problem.

    The message says where the problem is and never quotes the arguments, which may be secret or huge.
    The fast path is one C-level encode; the walk runs only when a cheap test says it might find something.
    """

    def fail(problem: str) -> JobArgumentsError:
        return JobArgumentsError(
            f"arguments of job {job_name!r} are not JSON-serialisable: {problem}; pass str, int, float, bool, None, "
            f"lists and dicts with str keys, nested at most {MAX_ARGS_DEPTH} levels"
        )

    try:
        encoded = _ENCODER.encode(args)
    except RecursionError:
        raise fail(f"they are nested more than {MAX_ARGS_DEPTH} levels deep") from None
    except (TypeError, ValueError):
        raise fail(_find_problem(args) or "they are not JSON-serialisable") from None
    try:
        raw = encoded.encode("utf-8")
    except UnicodeEncodeError:
        raise fail(_find_problem(args) or "they contain a lone surrogate") from None
    # Containers cannot nest deeper than there are brackets, and a NUL always shows as its escape.
    suspicious = encoded.count("[") + encoded.count("{") >= MAX_ARGS_DEPTH or "\\u0000" in encoded
    if suspicious:
        problem = _find_problem(args)
        if problem is not None:
            raise fail(problem)
    if len(raw) > max_bytes:
        raise JobArgumentsError(
            f"arguments of job {job_name!r} are {len(raw)} bytes as JSON, over the limit of {max_bytes} bytes "
            "(setting 'max_args_bytes', environment variable SONIQ_MAX_ARGS_BYTES); store large payloads "
            "elsewhere and pass a reference"
        )
    return dict(args), encoded
