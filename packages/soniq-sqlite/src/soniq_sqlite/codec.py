"""Conversions between stored SQLite values and core's frozen records."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from soniq.backend import (
    DeadLetterRecord,
    DependencyPolicy,
    JobRecord,
    JobStatus,
    WorkerRecord,
    WorkerStatus,
    decode_args,
    decode_json,
    join_problems,
)
from soniq.errors import JobArgumentsError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

Row = Sequence[Any]


def now_us() -> int:
    """The store's clock: every process on one file shares this machine's clock."""
    return time.time_ns() // 1000


def to_us(moment: datetime) -> int:
    """Exact microseconds since the epoch; a naive datetime is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _MICROSECOND


def from_us(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def from_us_or_none(value: int | None) -> datetime | None:
    return None if value is None else _EPOCH + timedelta(microseconds=value)


def dump_json(value: Any, *, what: str) -> str:
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        # sqlite3 binds text as UTF-8: a lone surrogate would fail inside the write.
        text.encode("utf-8")
    except RecursionError:
        raise JobArgumentsError(f"{what} cannot be stored as JSON: nested too deeply") from None
    except (TypeError, ValueError) as exc:
        raise JobArgumentsError(f"{what} cannot be stored as JSON: {exc}") from exc
    return text


def dump_args(args: Mapping[str, Any]) -> str:
    return dump_json(dict(args), what="job args")


def dump_optional_json(value: Any, *, what: str) -> str | None:
    return None if value is None else dump_json(value, what=what)


def load_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def job_from_row(row: Row) -> JobRecord:
    """A row selected with `schema.JOB_COLUMNS`, in that order."""
    args, args_problem = decode_args(row[2])
    result, result_problem = decode_json(row[11], "result")
    # A trace context only links spans: an unreadable one is dropped, never reported.
    trace, _ = decode_json(row[15], "trace context")
    return JobRecord(
        id=row[0],
        job_name=row[1],
        args=args,
        status=JobStatus(row[3]),
        attempts=row[4],
        max_attempts=row[5],
        queue=row[6],
        priority=row[7],
        scheduled_at=from_us(row[8]),
        last_error=row[9],
        worker_id=row[10],
        result=result,
        created_at=from_us(row[12]),
        updated_at=from_us(row[13]),
        started_at=from_us_or_none(row[14]),
        trace_context=trace if isinstance(trace, dict) else None,
        decode_error=join_problems(args_problem, result_problem),
        expires_at=from_us_or_none(row[16]) if len(row) > 16 else None,
        dedup_key=row[17] if len(row) > 17 else None,
        producer_id=row[18] if len(row) > 18 else None,
        depends_on=load_ids(row[19]) if len(row) > 19 else (),
        waiting_on=int(row[20]) if len(row) > 20 else 0,
        dependency_policy=DependencyPolicy(row[21]) if len(row) > 21 else DependencyPolicy.CANCEL,
        limit_key=row[22] if len(row) > 22 else None,
        cancel_requested=bool(row[23]) if len(row) > 23 else False,
        shutdown_nacks=int(row[24]) if len(row) > 24 else 0,
        version=int(row[25]) if len(row) > 25 else 1,
        steps=load_steps(row[26]) if len(row) > 26 else {},
        checkpoint=load_checkpoint(row[27]) if len(row) > 27 else None,
        progress=load_progress(row[28]) if len(row) > 28 else None,
    )


def load_steps(text: str | None) -> dict[str, Any]:
    """A row's `steps` column: the common empty object costs no JSON parse; anything unreadable
    (or not an object) reads as no steps."""
    if text is None or text == "{}":
        return {}
    value, problem = decode_json(text, "steps")
    return value if problem is None and isinstance(value, dict) else {}


def load_checkpoint(text: str | None) -> Any:
    """A row's `checkpoint` column: NULL (none stored) and anything unreadable read as None."""
    if text is None:
        return None
    value, problem = decode_json(text, "checkpoint")
    return value if problem is None else None


def load_progress(text: str | None) -> dict[str, Any] | None:
    """A row's `progress` column: NULL (none stored), anything unreadable and anything but a JSON
    object read as None."""
    if text is None:
        return None
    value, problem = decode_json(text, "progress")
    return value if problem is None and isinstance(value, dict) else None


def load_versions(text: str | None) -> dict[str, int] | None:
    """A worker's `job_versions`: name to version, None when not reported or unreadable."""
    if text is None:
        return None
    value, problem = decode_json(text, "job versions")
    if problem is not None or not isinstance(value, dict):
        return None
    try:
        return {str(name): int(version) for name, version in value.items()}
    except (TypeError, ValueError):
        return None


def dump_ids(ids: Sequence[str]) -> str:
    """`depends_on` as stored: a JSON array of ids (``[]`` for none, the column's default)."""
    return json.dumps(list(ids), separators=(",", ":"), ensure_ascii=False) if ids else "[]"


def load_ids(text: str | None) -> tuple[str, ...]:
    if not text or text == "[]":
        return ()
    try:
        value = json.loads(text)
    except ValueError:
        return ()
    return tuple(str(item) for item in value) if isinstance(value, list) else ()


def dead_letter_from_row(row: Row) -> DeadLetterRecord:
    """A row selected with `schema.DEAD_LETTER_COLUMNS`, in that order."""
    args, problem = decode_args(row[2])
    return DeadLetterRecord(
        id=row[0],
        job_name=row[1],
        args=args,
        queue=row[3],
        attempts=row[4],
        last_error=row[5],
        dead_letter_reason=row[6],
        moved_to_dead_letter_at=from_us(row[7]),
        resurrection_count=row[8],
        last_resurrection_at=from_us_or_none(row[9]),
        max_attempts=row[10],
        priority=row[11],
        decode_error=problem,
        version=row[12],
    )


def worker_from_row(row: Row) -> WorkerRecord:
    """A row selected with `schema.WORKER_COLUMNS`, in that order."""
    queues = row[3]
    names, problem = decode_json(row[8], "job names")
    shutdown, _ = decode_json(row[11], "last_shutdown")
    return WorkerRecord(
        id=row[0],
        hostname=row[1],
        pid=row[2],
        queues=None if queues is None else tuple(json.loads(queues)),
        concurrency=row[4],
        status=WorkerStatus(row[5]),
        last_heartbeat=from_us(row[6]),
        started_at=from_us(row[7]),
        # Anything unreadable counts as "not reported".
        job_names=tuple(map(str, names)) if problem is None and isinstance(names, list) else None,
        state=row[9],
        state_changed_at=from_us_or_none(row[10]),
        last_shutdown=shutdown if isinstance(shutdown, dict) else None,
        job_versions=load_versions(row[12]) if len(row) > 12 else None,
    )


def claim_order(record: JobRecord) -> tuple[int, datetime, datetime, str]:
    return (record.priority, record.scheduled_at, record.created_at, record.id)
