"""Redis hashes to and from Soniq's frozen records.

Timestamps are stored as integer microseconds since the Unix epoch (the
server's clock, read with TIME inside the scripts); `args`, `result`,
`trace_context`, worker `queues` and `job_versions`, and a job's `steps`,
`checkpoint`, `progress` and `logs` are JSON. A field that is absent from a hash
is NULL, except the fields a row written before they existed lacks:
`shutdown_nacks` reads as 0, `version` as 1 and `steps` as an empty object.
`logs` is never decoded here: no record holds it (`get_job_logs` returns the text).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from soniq.backend import (
    DeadLetterRecord,
    DependencyPolicy,
    JobRecord,
    JobStatus,
    PausedQueue,
    WorkerRecord,
    WorkerStatus,
    decode_args,
    decode_json,
    join_problems,
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - EPOCH) // _MICROSECOND


def from_micros(value: str | int) -> datetime:
    return EPOCH + timedelta(microseconds=int(value))


def _optional_time(fields: Mapping[str, str], name: str) -> datetime | None:
    value = fields.get(name)
    return None if value is None else from_micros(value)


def dumps(value: Any) -> str:
    # ASCII-only JSON: NUL, quotes, lone surrogates and every other awkward
    # character travels as an escape and comes back exactly.
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def pairs(flat: Sequence[Any]) -> dict[str, str]:
    """A flat HGETALL reply from a script (``[k1, v1, k2, v2, ...]``) as a dict."""
    items = [str(item) for item in flat]
    return dict(zip(items[0::2], items[1::2], strict=True))


def text_map(fields: Mapping[Any, Any]) -> dict[str, str]:
    """An HGETALL reply as text (the client decodes, but its types say bytes | str)."""
    return {str(key): str(value) for key, value in fields.items()}


def _depends_on(text: str | None) -> tuple[str, ...]:
    # Written by enqueue.lua from our own JSON; a value another program broke reads as none.
    if not text:
        return ()
    value, _ = decode_json(text, "depends_on")
    return tuple(str(item) for item in value) if isinstance(value, list) else ()


def _steps(text: str | None) -> dict[str, Any]:
    # Written by save_step.lua from core's JSON; a value another program broke reads as none.
    if not text or text == "{}":  # no step yet: most rows, on the claim path
        return {}
    value, _ = decode_json(text, "steps")
    return value if isinstance(value, dict) else {}


def _checkpoint(text: str | None) -> Any:
    return None if text is None else decode_json(text, "checkpoint")[0]


def _progress(text: str | None) -> dict[str, Any] | None:
    # Written by save_progress.lua from core's JSON; a value another program broke reads as none.
    if text is None:
        return None
    value, _ = decode_json(text, "progress")
    return value if isinstance(value, dict) else None


def job_record(fields: Mapping[str, str]) -> JobRecord:
    trace_text = fields.get("trace_context")
    result_text = fields.get("result")
    args, args_error = decode_args(fields.get("args"))
    result, result_error = (None, None) if result_text is None else decode_json(result_text, "result")
    trace = None if trace_text is None else decode_json(trace_text, "trace context")[0]
    if not isinstance(trace, dict):
        # A broken trace context costs only the link to the producer's trace, not the row.
        trace = None
    return JobRecord(
        id=fields["id"],
        job_name=fields["job_name"],
        args=args,
        status=JobStatus(fields["status"]),
        attempts=int(fields["attempts"]),
        max_attempts=int(fields["max_attempts"]),
        queue=fields["queue"],
        priority=int(fields["priority"]),
        scheduled_at=from_micros(fields["scheduled_at"]),
        last_error=fields.get("last_error"),
        worker_id=fields.get("worker_id"),
        result=result,
        created_at=from_micros(fields["created_at"]),
        updated_at=from_micros(fields["updated_at"]),
        started_at=_optional_time(fields, "started_at"),
        trace_context=trace,
        expires_at=_optional_time(fields, "expires_at"),
        decode_error=join_problems(args_error, result_error),
        dedup_key=fields.get("dedup_key"),
        producer_id=fields.get("producer_id"),
        depends_on=_depends_on(fields.get("depends_on")),
        waiting_on=int(fields.get("waiting_on", "0")),
        dependency_policy=DependencyPolicy(fields.get("dependency_policy", DependencyPolicy.CANCEL.value)),
        limit_key=fields.get("limit_key"),
        cancel_requested=fields.get("cancel_requested") == "1",
        shutdown_nacks=int(fields.get("shutdown_nacks", "0")),
        version=int(fields.get("version", "1")),
        steps=_steps(fields.get("steps")),
        checkpoint=_checkpoint(fields.get("checkpoint")),
        progress=_progress(fields.get("progress")),
    )


def dead_letter_record(fields: Mapping[str, str]) -> DeadLetterRecord:
    args, args_error = decode_args(fields.get("args"))
    return DeadLetterRecord(
        id=fields["id"],
        job_name=fields["job_name"],
        args=args,
        queue=fields["queue"],
        attempts=int(fields["attempts"]),
        last_error=fields.get("last_error"),
        dead_letter_reason=fields["dead_letter_reason"],
        moved_to_dead_letter_at=from_micros(fields["moved_to_dead_letter_at"]),
        resurrection_count=int(fields.get("resurrection_count", "0")),
        last_resurrection_at=_optional_time(fields, "last_resurrection_at"),
        max_attempts=int(fields["max_attempts"]),
        priority=int(fields["priority"]),
        decode_error=args_error,
        version=int(fields.get("version", "1")),
    )


def paused_queue(queue: str, text: str) -> PausedQueue:
    """One entry of the `paused_queues` hash (JSON written by pause_queue.lua)."""
    value = json.loads(text)
    reason = value.get("reason")
    return PausedQueue(
        queue=queue,
        reason=None if reason is None else str(reason),
        paused_at=from_micros(int(value["paused_at"])),
    )


def _shutdown(text: str | None) -> dict[str, Any] | None:
    # A summary this worker cannot read is shown as none rather than failing the workers listing.
    value, _ = (None, None) if text is None else decode_json(text, "last_shutdown")
    return value if isinstance(value, dict) else None


def worker_record(fields: Mapping[str, str]) -> WorkerRecord:
    queues = json.loads(fields["queues"])
    names_text = fields.get("job_names")
    names = None if names_text is None else json.loads(names_text)
    versions_text = fields.get("job_versions")
    versions = None if versions_text is None else json.loads(versions_text)
    return WorkerRecord(
        id=fields["id"],
        hostname=fields["hostname"],
        pid=int(fields["pid"]),
        queues=None if queues is None else tuple(queues),
        concurrency=int(fields["concurrency"]),
        status=WorkerStatus(fields["status"]),
        last_heartbeat=from_micros(fields["last_heartbeat"]),
        started_at=from_micros(fields["started_at"]),
        job_names=None if names is None else tuple(names),
        state=fields.get("state"),
        state_changed_at=_optional_time(fields, "state_changed_at"),
        last_shutdown=_shutdown(fields.get("last_shutdown")),
        job_versions=None if versions is None else {str(name): int(v) for name, v in versions.items()},
    )
