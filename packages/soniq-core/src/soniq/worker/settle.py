"""Writing a run's outcome to the store: done, retry, snooze or dead letter."""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from soniq.backend import Backend
from soniq.outcomes import JobOutcome
from soniq.params import DeadLetterJobParams, RetryJobParams, SnoozeJobParams
from soniq.records import DeadLetterReason
from soniq.retry import RetryPolicy
from soniq.serialization import check_result
from soniq.worker._runs import JobRun, Outcome
from soniq.worker.batching import CompletionBatcher
from soniq.worker.writes import write_with_retry

logger = logging.getLogger("soniq.worker")

RETRY_REASON_ERROR = "error"
RETRY_REASON_TIMEOUT = "timeout"


@dataclass(frozen=True, slots=True)
class Settled:
    """How a run's outcome write went, as the job-end event reports it."""

    outcome: JobOutcome
    error_text: str | None = None
    reason: str | None = None


def describe_error(exc: BaseException) -> str:
    """`Type: message` plus the innermost frame, kept short enough for a column."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    if frames:
        last = frames[-1]
        text += f" (at {last.filename}:{last.lineno} in {last.name})"
    return text[:4000]


class Settler:
    def __init__(
        self, backend: Backend, worker_id: str, retry_policy: RetryPolicy, completions: CompletionBatcher
    ) -> None:
        self._backend = backend
        self._completions = completions
        self._worker_id = worker_id
        self._retry = retry_policy

    async def settle(self, run: JobRun, outcome: Outcome, *, give_up_at: float | None) -> Settled:
        """Write the outcome of a handler call and say how it went."""
        job = run.job
        if outcome.ok:
            try:
                result = check_result(outcome.result)
            except TypeError as exc:
                outcome = Outcome(ok=False, error=exc)
            else:
                written = await self._completions.complete(job.id, result)
                return Settled(self._named(JobOutcome.DONE, written, run))
        if outcome.snooze_seconds is not None:
            when = datetime.now(UTC) + timedelta(seconds=outcome.snooze_seconds)
            written = await write_with_retry(
                f"snooze for job {job.id}",
                lambda: self._backend.snooze_job(
                    SnoozeJobParams(job_id=job.id, worker_id=self._worker_id, scheduled_at=when)
                ),
                give_up_at=give_up_at,
            )
            return Settled(self._named(JobOutcome.SNOOZED, written, run))
        assert outcome.error is not None
        error = describe_error(outcome.error)
        attempts_after = job.attempts + 1
        if attempts_after >= job.max_attempts:
            reason = DeadLetterReason.MAX_ATTEMPTS.value
            written = await write_with_retry(
                f"dead letter for job {job.id}",
                lambda: self._backend.dead_letter_job(
                    DeadLetterJobParams(job_id=job.id, worker_id=self._worker_id, error=error, reason=reason)
                ),
                give_up_at=give_up_at,
            )
            logger.warning(
                "job %s (%s) failed on attempt %d of %d and moved to the dead-letter table: %s",
                job.id,
                job.job_name,
                attempts_after,
                job.max_attempts,
                error,
            )
            return Settled(self._named(JobOutcome.DEAD_LETTER, written, run), error, reason)
        when = datetime.now(UTC) + timedelta(seconds=self._retry.delay(attempts_after))
        written = await write_with_retry(
            f"retry for job {job.id}",
            lambda: self._backend.retry_job(
                RetryJobParams(job_id=job.id, worker_id=self._worker_id, error=error, scheduled_at=when)
            ),
            give_up_at=give_up_at,
        )
        logger.info(
            "job %s (%s) failed on attempt %d of %d, retrying at %s: %s",
            job.id,
            job.job_name,
            attempts_after,
            job.max_attempts,
            when.isoformat(),
            error,
        )
        kind = JobOutcome.TIMEOUT_RETRY if outcome.timed_out else JobOutcome.RETRY
        reason = RETRY_REASON_TIMEOUT if outcome.timed_out else RETRY_REASON_ERROR
        return Settled(self._named(kind, written, run), error, reason)

    async def dead_letter_unknown(self, run: JobRun, known: list[str], *, give_up_at: float | None) -> Settled:
        """Move a row no registered job can run to the dead-letter table."""
        job = run.job
        error = (
            f"no job named {job.job_name!r} is registered in this worker; registered: {', '.join(known) or 'none'} "
            "(check --jobs-modules / SONIQ_JOBS_MODULES)"
        )
        written = await write_with_retry(
            f"dead letter for job {job.id}",
            lambda: self._backend.dead_letter_job(
                DeadLetterJobParams(
                    job_id=job.id, worker_id=self._worker_id, error=error, reason=DeadLetterReason.UNKNOWN_JOB.value
                )
            ),
            give_up_at=give_up_at,
        )
        logger.error("job %s moved to the dead-letter table: %s", job.id, error)
        outcome = self._named(JobOutcome.DEAD_LETTER, written, run)
        return Settled(outcome, error, DeadLetterReason.UNKNOWN_JOB.value)

    def _named(self, name: JobOutcome, written: bool | None, run: JobRun) -> JobOutcome:
        if written is False:
            logger.warning(
                "job %s: the row is no longer owned by this worker (stale recovery reclaimed it?); "
                "the %s outcome was not written",
                run.job.id,
                name.value,
            )
            return JobOutcome.LOST
        if written is None:
            return JobOutcome.UNWRITTEN
        return name
