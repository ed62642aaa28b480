"""How the producer and read APIs show a job: `job_dict` for a row of the jobs table,
`dead_letter_job_dict` for a dead-letter row in the same shape."""

from __future__ import annotations

from typing import Any

from soniq.encryption import SHOWN, is_sealed_text, shown
from soniq.records import DeadLetterRecord, JobRecord, JobStatus

__all__ = ["dead_letter_job_dict", "job_dict"]


def job_dict(row: JobRecord, *, with_result: bool = True) -> dict[str, Any]:
    """A job row as the producer API returns it.

    `error_from_earlier_attempt` is True for a ``done`` row that still carries the `last_error`
    of an attempt that failed before the one that succeeded, so that text is not read as why it
    is in its state.
    """
    data = row.to_dict()
    if not with_result:
        data["result"] = None
    shown_sealed(data)
    data["error_from_earlier_attempt"] = row.status is JobStatus.DONE and row.last_error is not None
    return data


def dead_letter_job_dict(row: DeadLetterRecord) -> dict[str, Any]:
    """A dead-letter row in the shape of `job_dict`, with ``status="dead_letter"`` and the
    dead-letter fields (`dead_letter_reason`, `moved_to_dead_letter_at`, `resurrection_count`,
    `last_resurrection_at`) added."""
    data = row.to_dict()
    data.update(
        status="dead_letter",
        result=None,
        worker_id=None,
        progress=None,
        error_from_earlier_attempt=False,
    )
    shown_sealed(data)
    return data


def shown_sealed(data: dict[str, Any]) -> None:
    """Sealed arguments, result and progress message read ``"encrypted"`` (see `soniq.encryption`)."""
    for field in ("args", "result"):
        data[field] = shown(data.get(field))
    progress = data.get("progress")
    if isinstance(progress, dict) and is_sealed_text(progress.get("message")):
        data["progress"] = {**progress, "message": SHOWN}
