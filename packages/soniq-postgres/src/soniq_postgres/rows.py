"""Driver rows to core's frozen records, and Python values to SQL parameters."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from soniq.backend import (
    DeadLetterRecord,
    DependencyPolicy,
    JobRecord,
    JobStatus,
    NewJob,
    WorkerRecord,
    WorkerStatus,
    decode_args,
    decode_json,
    join_problems,
)


def to_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def optional_json(value: Mapping[str, Any] | None) -> str | None:
    return None if value is None else to_json(dict(value))


def utc(value: datetime) -> datetime:
    """asyncpg returns aware datetimes in UTC already; naive input is taken as UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def job_record(row: Mapping[str, Any]) -> JobRecord:
    started = row["started_at"]
    args, args_problem = decode_args(row["args"])
    result, result_problem = decode_json(row["result"], "result")
    # A trace context only links spans: an unreadable one is dropped, never reported.
    trace, _ = decode_json(row["trace_context"], "trace context")
    if not isinstance(trace, dict):
        trace = None
    # Rows read without these columns (or stored before them) have no steps and version 1.
    steps, steps_problem = decode_json(row.get("steps"), "steps")
    if not isinstance(steps, dict):
        steps_problem = steps_problem or ("steps are not a JSON object" if steps is not None else None)
        steps = {}
    checkpoint, checkpoint_problem = decode_json(row.get("checkpoint"), "checkpoint")
    # Progress is only shown: an unreadable one (or not an object) reads as none, never reported.
    progress, _ = decode_json(row.get("progress"), "progress")
    if not isinstance(progress, dict):
        progress = None
    return JobRecord(
        id=row["id"],
        job_name=row["job_name"],
        args=args,
        status=JobStatus(row["status"]),
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        queue=row["queue"],
        priority=row["priority"],
        scheduled_at=utc(row["scheduled_at"]),
        last_error=row["last_error"],
        worker_id=row["worker_id"],
        result=result,
        created_at=utc(row["created_at"]),
        updated_at=utc(row["updated_at"]),
        started_at=None if started is None else utc(started),
        trace_context=trace,
        decode_error=join_problems(args_problem, result_problem, steps_problem, checkpoint_problem),
        expires_at=_optional_utc(row.get("expires_at")),
        dedup_key=row.get("dedup_key"),
        producer_id=row.get("producer_id"),
        depends_on=tuple(row.get("depends_on") or ()),
        waiting_on=row.get("waiting_on") or 0,
        dependency_policy=DependencyPolicy(row.get("dependency_policy") or DependencyPolicy.CANCEL.value),
        limit_key=row.get("limit_key"),
        cancel_requested=bool(row.get("cancel_requested")),
        shutdown_nacks=row.get("shutdown_nacks") or 0,
        version=row.get("version") or 1,
        steps=steps,
        checkpoint=checkpoint,
        progress=progress,
    )


def _optional_utc(value: datetime | None) -> datetime | None:
    return None if value is None else utc(value)


def dead_letter_record(row: Mapping[str, Any]) -> DeadLetterRecord:
    revived = row["last_resurrection_at"]
    args, problem = decode_args(row["args"])
    return DeadLetterRecord(
        id=row["id"],
        job_name=row["job_name"],
        args=args,
        queue=row["queue"],
        attempts=row["attempts"],
        last_error=row["last_error"],
        dead_letter_reason=row["dead_letter_reason"],
        moved_to_dead_letter_at=utc(row["moved_to_dead_letter_at"]),
        resurrection_count=row["resurrection_count"],
        last_resurrection_at=None if revived is None else utc(revived),
        max_attempts=row["max_attempts"],
        priority=row["priority"],
        decode_error=problem,
        version=row["version"],
    )


def worker_record(row: Mapping[str, Any]) -> WorkerRecord:
    queues = row["queues"]
    return WorkerRecord(
        id=row["id"],
        hostname=row["hostname"],
        pid=row["pid"],
        queues=None if queues is None else tuple(queues),
        concurrency=row["concurrency"],
        status=WorkerStatus(row["status"]),
        last_heartbeat=utc(row["last_heartbeat"]),
        started_at=utc(row["started_at"]),
        job_names=worker_job_names(row["job_names"]),
        state=row.get("state"),
        state_changed_at=None if row.get("state_changed_at") is None else utc(row["state_changed_at"]),
        last_shutdown=_shutdown(row.get("last_shutdown")),
        job_versions=worker_job_versions(row.get("job_versions")),
    )


def _shutdown(text: str | None) -> dict[str, Any] | None:
    # A summary this worker cannot read is shown as none rather than failing the workers listing.
    value, _ = decode_json(text, "last_shutdown")
    return value if isinstance(value, dict) else None


def worker_job_names(text: str | None) -> tuple[str, ...] | None:
    """The stored list of names; anything unreadable counts as "not reported"."""
    value, problem = decode_json(text, "job names")
    if problem is not None or not isinstance(value, list):
        return None
    return tuple(str(name) for name in value)


def worker_job_versions(text: str | None) -> dict[str, int] | None:
    """The stored versions by job name; anything unreadable counts as "not reported"."""
    value, problem = decode_json(text, "job versions")
    if problem is not None or not isinstance(value, dict):
        return None
    return {str(name): int(version) for name, version in value.items() if isinstance(version, int)}


def claim_order(record: JobRecord) -> tuple[int, datetime, datetime, str]:
    return (record.priority, record.scheduled_at, record.created_at, record.id)


def affected(status: str) -> int:
    """The row count of a command tag such as ``UPDATE 1``."""
    try:
        return int(status.rsplit(" ", 1)[-1])
    except ValueError:
        return 0


def job_arrays(jobs: Sequence[NewJob]) -> list[list[Any]]:
    """The first eight parameters of every multi-row insert, one array per column: id, job_name,
    args, queue, priority, scheduled_at, max_attempts, trace_context."""
    return [
        [job.id for job in jobs],
        [job.job_name for job in jobs],
        [job.args_json or to_json(dict(job.args)) for job in jobs],
        [job.queue for job in jobs],
        [job.priority for job in jobs],
        [utc(job.scheduled_at) for job in jobs],
        [job.max_attempts for job in jobs],
        [optional_json(job.trace_context) for job in jobs],
    ]


def debounce_deadlines(jobs: Sequence[NewJob]) -> list[datetime | None]:
    """Each job's `debounce_deadline` as a parameter (None: not debounced)."""
    return [None if job.debounce_deadline is None else utc(job.debounce_deadline) for job in jobs]


def window_arrays(jobs: Sequence[NewJob]) -> list[list[Any]]:
    """Three parameters, one array each: every job's window key, start and end (None without one)."""
    windows = [job.unique_window for job in jobs]
    return [
        [None if window is None else window.key for window in windows],
        [None if window is None else utc(window.starts_at) for window in windows],
        [None if window is None else utc(window.expires_at) for window in windows],
    ]
