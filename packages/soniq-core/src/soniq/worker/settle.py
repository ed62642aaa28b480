"""Writing a run's outcome to the store: done, retry, snooze or dead letter.

Everything written is made safe first (results checked, error texts escaped,
dates bounded), and a write the store refuses for any reason other than a
lost connection settles that one row as a failure with the store's own
error, so one bad value never leaves its row, or another, `processing`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import math
import os
import threading
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TypeVar

from soniq import features
from soniq.backend import QueueStore
from soniq.errors import Permanent
from soniq.outcomes import JobOutcome
from soniq.params import (
    DeadLetterJobParams,
    FinishCancelParams,
    GetJobParams,
    NackJobParams,
    RetryJobParams,
    SnoozeJobParams,
)
from soniq.records import DeadLetterReason, JobRecord, JobStatus
from soniq.redaction import redact_text
from soniq.retry import JobRetryDelays, RetryPolicy, bounded_delay
from soniq.serialization import ResultError, check_result, printable_lines, safe_text
from soniq.worker._runs import JobRun, Outcome
from soniq.worker.batching import CompletionBatcher
from soniq.worker.writes import Deadline, write_with_retry

logger = logging.getLogger("soniq.worker")

T = TypeVar("T")

REASON_CANCEL_REQUESTED = "cancel_requested"
"""The job-end reason of a run a cancel request stopped (outcome ``cancelled``)."""
RETRY_REASON_ERROR = "error"
RETRY_REASON_TIMEOUT = "timeout"
MAX_ERROR_CHARS = 8192
"""`last_error` keeps the summary line and the innermost frames within this many characters."""


@dataclass(frozen=True, slots=True)
class Settled:
    """How a run's outcome write went, as the job-end event reports it."""

    outcome: JobOutcome
    error_text: str | None = None
    reason: str | None = None


_INTERNAL_DIRS = tuple(
    os.path.dirname(module.__file__ or "") + os.sep for module in (features, asyncio, concurrent.futures)
)
"""Frames in these packages (and in `threading`) are Soniq's and the event loop's way into a handler,
not the user's code."""


def _internal(filename: str) -> bool:
    return filename.startswith(_INTERNAL_DIRS) or filename == threading.__file__


def user_traceback(exc: BaseException) -> TracebackType | None:
    """`exc`'s traceback from the first frame outside Soniq's executor and asyncio: the user's own
    call first. An error raised by Soniq itself (no user frame at all) keeps its whole traceback."""
    first = exc.__traceback__
    tb = first
    while tb is not None and _internal(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb if tb is not None else first


def error_summary(exc: BaseException) -> str:
    """``Type: message`` as one line (line breaks in the message written as ``\\n``): what list views show."""
    try:
        message = str(exc)
    except Exception:  # a broken __str__ in user code must not stop the write
        message = "<the exception's __str__ failed>"
    summary = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return safe_text(summary.replace("\r", "\\r").replace("\n", "\\n"))


def describe_error(exc: BaseException, *, limit: int = MAX_ERROR_CHARS) -> str:
    """The summary line (`error_summary`), then the traceback from the user's frame (chained causes
    included) when there is one, without its last line, which would repeat the summary.

    Over `limit` characters, the middle goes: the summary line and the
    innermost frames, where the user's own failing line is, are kept.
    """
    summary = error_summary(exc)
    try:
        formatted = traceback.TracebackException(type(exc), exc, user_traceback(exc), compact=True)
        lines = list(formatted.format())
        last = list(formatted.format_exception_only())
    except Exception:  # a broken __str__ or __repr__ in user code must not stop the write
        lines, last = [], []
    if last and lines[-len(last) :] == last:
        lines = lines[: -len(last)]
        notes = getattr(exc, "__notes__", None)
        if isinstance(notes, list | tuple):  # notes are not in the summary: they stay
            lines.extend(f"{note}\n" for note in notes if isinstance(note, str))
    trace = "".join(lines).rstrip()
    text = safe_text(f"{summary}\n{trace}" if trace else summary)
    if len(text) > limit:
        head = summary[: limit // 4]
        marker = "\n[... traceback cut to its innermost frames ...]\n"
        text = head + marker + text[-(limit - len(head) - len(marker)) :]
    return text


def log_traceback(exc: BaseException | None) -> tuple[type[BaseException], BaseException, TracebackType] | None:
    """The ``exc_info`` that logs `exc` with its traceback from the user's frame; None when it has no
    traceback (a timeout, a refused write), so that the log line is the summary alone."""
    if exc is None:
        return None
    tb = user_traceback(exc)
    if tb is None:
        return None
    return type(exc), exc, tb


class _StorableTraceback(logging.Filter):
    """Formats a record's traceback up front, one line per line with control characters and lone
    surrogates escaped (`printable_lines`): no handler's error message can rewrite the terminal, forge a
    log line, or fail a handler that writes strict UTF-8 (a file, a test runner's report). Handlers that
    read ``exc_info`` themselves still get the exception."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            _, value, tb = record.exc_info
            try:
                text = "".join(traceback.format_exception(type(value), value, tb)).rstrip("\n")
            except Exception:
                return True
            record.exc_text = printable_lines(redact_text(text))
        return True


logger.addFilter(_StorableTraceback())


class Settler:
    def __init__(
        self,
        backend: QueueStore,
        worker_id: str,
        retry_policy: RetryPolicy | JobRetryDelays,
        completions: CompletionBatcher,
        *,
        max_result_bytes: int,
        snooze_max_seconds: float,
    ) -> None:
        self._backend = backend
        self._completions = completions
        self._worker_id = worker_id
        self._retry = retry_policy if isinstance(retry_policy, JobRetryDelays) else JobRetryDelays(retry_policy)
        self._max_result_bytes = max_result_bytes
        self._snooze_max = snooze_max_seconds

    async def settle(self, run: JobRun, outcome: Outcome, *, give_up_at: Deadline) -> Settled:
        """Write the outcome of a handler call and say how it went."""
        job = run.job
        if outcome.hand_back is not None:
            return await self.hand_back(run, outcome.hand_back, outcome.hand_back_reason, give_up_at=give_up_at)
        if outcome.ok:
            try:
                result = check_result(outcome.result, max_bytes=self._max_result_bytes)
                if run.cipher is not None:  # an encrypted job: the store keeps only the sealed result
                    result = run.cipher.seal(result)
            except ResultError as exc:
                outcome = Outcome(ok=False, error=exc)
            else:
                try:
                    written = await self._completions.complete(job.id, result)
                except Exception as exc:
                    logger.error("job %s (%s): the store refused its result: %s", job.id, job.job_name, exc)
                    outcome = Outcome(ok=False, error=ResultError(f"the store refused the job result: {exc}"))
                else:
                    return Settled(self._named(JobOutcome.DONE, written, run))
        if outcome.snooze_seconds is not None:
            seconds = outcome.snooze_seconds
            if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
                outcome = Outcome(ok=False, error=ValueError(f"Snooze seconds must be finite and >= 0, got {seconds}"))
            else:
                settled = await self._snooze(run, min(seconds, self._snooze_max), give_up_at)
                if settled is not None:
                    return settled
                outcome = Outcome(ok=False, error=self._refused or RuntimeError("the store refused the snooze"))
        assert outcome.error is not None
        return await self.fail(run, outcome, give_up_at=give_up_at)

    async def _snooze(self, run: JobRun, seconds: float, give_up_at: Deadline) -> Settled | None:
        job = run.job
        when = _due_in(seconds)
        params = SnoozeJobParams(job_id=job.id, worker_id=self._worker_id, scheduled_at=when)
        ok, written = await self._write(
            f"snooze for job {job.id}", lambda: self._backend.snooze_job(params), give_up_at
        )
        return Settled(self._named(JobOutcome.SNOOZED, written, run)) if ok else None

    async def fail(self, run: JobRun, outcome: Outcome, *, give_up_at: Deadline) -> Settled:
        """Count the attempt: retry per policy, or dead-letter when the budget is spent (or the
        handler said `Permanent`, or would not stop)."""
        job = run.job
        assert outcome.error is not None
        error = describe_error(outcome.error)
        attempts_after = job.attempts + 1
        reason: str | None = None
        delay: float | None = None
        if isinstance(outcome.error, Permanent):
            reason = getattr(outcome.error, "dead_letter_reason", DeadLetterReason.NON_RETRYABLE.value)
        elif attempts_after >= job.max_attempts:
            reason = DeadLetterReason.STUCK.value if outcome.stuck else DeadLetterReason.MAX_ATTEMPTS.value
        else:
            try:
                delay = self._retry.delay_for(run.definition, attempts_after, outcome.error)
            except Exception as exc:
                logger.exception("job %s (%s): the retry policy raised; default backoff used", job.id, job.job_name)
                error = safe_text(f"{error}\n\nthen the retry policy raised: {type(exc).__name__}: {exc}")
                delay = self._retry.default.delay(attempts_after)
            if delay is None:
                # The app's retry_policy declined another run.
                reason = DeadLetterReason.NON_RETRYABLE.value
                error = safe_text(f"the retry policy declined a retry: {error}")
        if reason is None:
            assert delay is not None
            when = _due_in(delay)
            ok, written = await self._write(
                f"retry for job {job.id}",
                lambda: self._backend.retry_job(
                    RetryJobParams(job_id=job.id, worker_id=self._worker_id, error=error, scheduled_at=when)
                ),
                give_up_at,
                landed=functools.partial(self._retry_landed, job, error),
            )
            if ok:
                logger.info(
                    "job %s (%s) failed on run %d of %d, retrying at %s: %s",
                    job.id,
                    job.job_name,
                    attempts_after,
                    job.max_attempts,
                    when.isoformat(),
                    error.partition("\n")[0],
                    exc_info=log_traceback(outcome.error),
                )
                kind = JobOutcome.TIMEOUT_RETRY if outcome.timed_out else JobOutcome.RETRY
                retry_reason = RETRY_REASON_TIMEOUT if outcome.timed_out else RETRY_REASON_ERROR
                return Settled(self._named(kind, written, run), error, retry_reason)
            # The store refused the retry itself, so it cannot be retried: dead letter, with both errors.
            reason = DeadLetterReason.NON_RETRYABLE.value
            error = safe_text(f"{error}\n\nthen the store refused the retry: {self._refused}")
        return await self.dead_letter(
            run, reason, error, give_up_at=give_up_at, attempt=attempts_after, exc=outcome.error
        )

    async def dead_letter(
        self,
        run: JobRun,
        reason: str,
        error: str,
        *,
        give_up_at: Deadline,
        attempt: int | None = None,
        exc: BaseException | None = None,
    ) -> Settled:
        """Move the row to the dead-letter table; a refused write is tried once more with a plain ASCII error.

        The log line carries the error's summary, and `exc`'s traceback from the user's frame on the
        lines below it (without `exc`, the whole `error` text)."""
        job = run.job
        text = error
        for _ in range(2):
            params = DeadLetterJobParams(job_id=job.id, worker_id=self._worker_id, error=text, reason=reason)
            ok, written = await self._write(
                f"dead letter for job {job.id}", functools.partial(self._backend.dead_letter_job, params), give_up_at
            )
            if ok:
                logger.warning(
                    "job %s (%s) moved to the dead-letter table (%s)%s: %s",
                    job.id,
                    job.job_name,
                    reason,
                    f" on run {attempt} of {job.max_attempts}" if attempt is not None else "",
                    text if exc is None else text.partition("\n")[0],
                    exc_info=log_traceback(exc),
                )
                return Settled(self._named(JobOutcome.DEAD_LETTER, written, run), text, reason)
            text = ascii(f"{error[:2000]} (the store refused the full text: {self._refused})")
        logger.error(
            "job %s (%s): the store refused every outcome write (%s); the row stays for stale recovery",
            job.id,
            job.job_name,
            self._refused,
        )
        return Settled(JobOutcome.UNWRITTEN, text, reason)

    async def hand_back(self, run: JobRun, warning: str, reason: str | None, *, give_up_at: Deadline) -> Settled:
        """Give a row whose handler never started back untouched (a nack, attempts kept), logging `warning`."""
        job = run.job
        params = NackJobParams(job_id=job.id, worker_id=self._worker_id)
        ok, written = await self._write(
            f"nack of job {job.id}", functools.partial(self._backend.nack_job, params), give_up_at
        )
        if not ok:
            logger.error("job %s (%s): the store refused the nack (%s)", job.id, job.job_name, self._refused)
            return Settled(JobOutcome.UNWRITTEN, warning, reason)
        logger.warning("%s", warning)
        return Settled(self._named(JobOutcome.NACKED, written, run), warning, reason)

    async def cancelled(self, run: JobRun, message: str, *, give_up_at: Deadline) -> Settled:
        """A cancel request stopped the run: the row ends `cancelled` with `message`, attempts untouched
        . A refused write leaves the row for stale recovery, like any unwritable outcome."""
        job = run.job
        text = safe_text(message)
        params = FinishCancelParams(job_id=job.id, worker_id=self._worker_id, message=text)
        # Only a cancel request reaches this, and only a backend with a CancelChannel takes one.
        channel = features.cancel_channel(self._backend)
        ok, written = await self._write(
            f"cancel of job {job.id}", functools.partial(channel.finish_cancel, params), give_up_at
        )
        if not ok:
            logger.error(
                "job %s (%s): the store refused the cancel (%s); the row stays for stale recovery",
                job.id,
                job.job_name,
                self._refused,
            )
            return Settled(JobOutcome.UNWRITTEN, text, REASON_CANCEL_REQUESTED)
        if written:
            logger.info(
                "job %s (%s) %s; run %d of %d is not counted against max_attempts",
                job.id,
                job.job_name,
                text,
                job.attempts + 1,
                job.max_attempts,
            )
        return Settled(self._named(JobOutcome.CANCELLED, written, run), text, REASON_CANCEL_REQUESTED)

    async def _write(
        self,
        what: str,
        operation: Callable[[], Awaitable[T]],
        give_up_at: Deadline,
        landed: Callable[[], Awaitable[T | None]] | None = None,
    ) -> tuple[bool, T | None]:
        """(True, result) when the store answered; (False, None) when it refused the write outright."""
        try:
            return True, await write_with_retry(what, operation, give_up_at=give_up_at, landed=landed)
        except Exception as exc:
            logger.error("the store refused the %s: %s: %s", what, type(exc).__name__, exc)
            self._refused = exc
            return False, None

    _refused: BaseException | None = None

    async def _retry_landed(self, job: JobRecord, error: str) -> bool | None:
        """After a lost connection: None if the row is still this run's (write the retry again), True if
        the lost retry was applied, False if the row moved on without it. Attempts tell the runs apart:
        an applied retry counted one, so a row this worker claimed again is never requeued twice."""
        row = await self._backend.get_job(GetJobParams(job_id=job.id))
        if row is None:
            return False
        if row.status is JobStatus.PROCESSING and row.worker_id == self._worker_id and row.attempts == job.attempts:
            return None
        return row.attempts == job.attempts + 1 and row.last_error == error

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


def _due_in(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=bounded_delay(seconds))
