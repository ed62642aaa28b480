"""Writing a run's outcome to the store: done, retry, snooze or dead letter."""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from soniq.backend import Backend
from soniq.errors import BackendUnavailableError
from soniq.records import DeadLetterReason
from soniq.retry import RetryPolicy
from soniq.serialization import check_result
from soniq.worker.runs import JobRun, Outcome

if TYPE_CHECKING:
    from soniq.worker.batching import CompletionBatcher

logger = logging.getLogger("soniq.worker")

T = TypeVar("T")

WRITE_RETRY_DELAYS = (0.05, 0.2, 0.5, 1.0, 2.0, 4.0)


def describe_error(exc: BaseException) -> str:
    """`Type: message` plus the innermost frame, kept short enough for a column."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    if frames:
        last = frames[-1]
        text += f" (at {last.filename}:{last.lineno} in {last.name})"
    return text[:4000]


async def write_with_retry(what: str, operation: Callable[[], Awaitable[T]], *, give_up_at: float | None) -> T | None:
    """Run a store write, retrying while the store is unreachable.

    Returns the write's result, or None when it could not be made before
    `give_up_at` (loop time); the row then stays `processing` under this
    worker and stale recovery settles it once the worker is gone.
    """
    loop = asyncio.get_running_loop()
    for delay in (*WRITE_RETRY_DELAYS, None):
        try:
            return await operation()
        except BackendUnavailableError as exc:
            if delay is None or (give_up_at is not None and loop.time() + delay > give_up_at):
                logger.error("could not write %s: %s; stale recovery will settle the row", what, exc)
                return None
            logger.warning("store unreachable while writing %s (%s); retrying in %.2fs", what, exc, delay)
            await asyncio.sleep(delay)
    return None


class Settler:
    def __init__(
        self, backend: Backend, worker_id: str, retry_policy: RetryPolicy, completions: CompletionBatcher
    ) -> None:
        self._backend = backend
        self._completions = completions
        self._worker_id = worker_id
        self._retry = retry_policy

    async def settle(self, run: JobRun, outcome: Outcome, *, give_up_at: float | None) -> tuple[str, str | None]:
        """Write the outcome; returns (outcome name, error text)."""
        job = run.job
        if outcome.ok:
            try:
                result = check_result(outcome.result)
            except TypeError as exc:
                outcome = Outcome(ok=False, error=exc)
            else:
                written = await self._completions.complete(job.id, result)
                return self._named("done", written, run), None
        if outcome.snooze_seconds is not None:
            when = datetime.now(UTC) + timedelta(seconds=outcome.snooze_seconds)
            written = await write_with_retry(
                f"snooze for job {job.id}",
                lambda: self._backend.snooze_job(job_id=job.id, worker_id=self._worker_id, scheduled_at=when),
                give_up_at=give_up_at,
            )
            return self._named("snoozed", written, run), None
        assert outcome.error is not None
        error = describe_error(outcome.error)
        attempts_after = job.attempts + 1
        if attempts_after >= job.max_attempts:
            reason = DeadLetterReason.MAX_ATTEMPTS.value
            written = await write_with_retry(
                f"dead letter for job {job.id}",
                lambda: self._backend.dead_letter_job(
                    job_id=job.id, worker_id=self._worker_id, error=error, reason=reason
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
            return self._named("dead_letter", written, run), error
        when = datetime.now(UTC) + timedelta(seconds=self._retry.delay(attempts_after))
        written = await write_with_retry(
            f"retry for job {job.id}",
            lambda: self._backend.retry_job(job_id=job.id, worker_id=self._worker_id, error=error, scheduled_at=when),
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
        return self._named("timeout_retry" if outcome.timed_out else "retry", written, run), error

    async def dead_letter_unknown(self, run: JobRun, known: list[str], *, give_up_at: float | None) -> str:
        """Move a row no registered job can run to the dead-letter table; returns the error text."""
        job = run.job
        error = (
            f"no job named {job.job_name!r} is registered in this worker; registered: {', '.join(known) or 'none'} "
            "(check --jobs-modules / SONIQ_JOBS_MODULES)"
        )
        written = await write_with_retry(
            f"dead letter for job {job.id}",
            lambda: self._backend.dead_letter_job(
                job_id=job.id, worker_id=self._worker_id, error=error, reason=DeadLetterReason.UNKNOWN_JOB.value
            ),
            give_up_at=give_up_at,
        )
        logger.error("job %s moved to the dead-letter table: %s", job.id, error)
        self._named("dead_letter", written, run)
        return error

    def _named(self, name: str, written: bool | None, run: JobRun) -> str:
        if written is False:
            logger.warning(
                "job %s: the row is no longer owned by this worker (stale recovery reclaimed it?); "
                "the %s outcome was not written",
                run.job.id,
                name,
            )
            return "lost"
        if written is None:
            return "unwritten"
        return name
