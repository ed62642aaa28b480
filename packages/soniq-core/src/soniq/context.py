"""`JobContext`: what a running handler may know about its own run."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, get_type_hints

if TYPE_CHECKING:
    from soniq.job_logs import JobLogger
    from soniq.run_reports import RunReports
    from soniq.steps import JobSteps


@dataclass(frozen=True, slots=True)
class JobContext:
    """The run of a job, passed to the handler parameter annotated ``JobContext``.

    `attempt` is 1-based and counts this run; a snoozed run does not use one up.
    `cancel_requested` becomes true when someone cancels the job while it runs
    (`app.cancel_job`); a plain ``def`` handler, which cannot be interrupted,
    polls it to stop early. It is safe to read from the handler's thread.
    """

    job_id: str
    job_name: str
    attempt: int
    max_attempts: int
    queue: str
    worker_id: str = ""
    scheduled_at: datetime | None = None
    created_at: datetime | None = None
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)
    """Set by the worker when a cancel request reaches this run."""
    _steps: JobSteps | None = field(default=None, repr=False, compare=False)
    """This run's completed steps and checkpoint (made by the worker from the claimed row)."""
    _reports: RunReports | None = field(default=None, repr=False, compare=False)
    """This run's progress and log (made by the worker; in memory for a JobContext made by hand)."""

    def _run_reports(self) -> RunReports:
        reports = self._reports
        if reports is None:
            from soniq.run_reports import RunReports

            reports = RunReports(job_id=self.job_id, job_name=self.job_name, worker_id=self.worker_id)
            object.__setattr__(self, "_reports", reports)
        return reports

    async def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Report how far this run has got: `done` of `total` (both numbers from 0 up, `done` at most
        `total`), with an optional short `message` (at most 1,000 characters).

        Stored with the job, coalesced to at most four writes a second and written once more when
        the run ends; read it in ``get_job(id)["progress"]`` as ``{"done", "total", "message",
        "updated_at"}``. A bad value raises `ProgressValueError` here. Needs the backend role
        `JobProgressStore`."""
        self._run_reports().progress().report(done, total, message)

    @property
    def logger(self) -> JobLogger:
        """A `logging.Logger`-compatible adapter whose records (INFO and up) are stored with the job,
        capped by `job_log_max_bytes`, and read with ``app.get_job_logs(job_id)``; each record also
        goes to the ``soniq.job_log`` logger. Safe to use from a plain ``def`` handler's thread.
        Needs the backend role `JobLogStore`."""
        return self._run_reports().logger()

    def _job_steps(self) -> JobSteps:
        steps = self._steps
        if steps is None:  # a JobContext made by hand (a test): values live only in this object
            from soniq.steps import JobSteps

            steps = JobSteps(job_id=self.job_id, worker_id=self.worker_id)
            object.__setattr__(self, "_steps", steps)
        return steps

    async def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` (awaited when async, in a thread when plain) only if this job
        has no completed step called `name`; store its JSON result with the job and return it.

        On a re-run of the same job id (a nack at shutdown, stale recovery, a retry) a completed
        step returns its stored value without calling `fn`. A bad name, a result that is not JSON
        or is over `max_result_bytes` raises `JobStepError`; a worker that lost the row raises
        `JobOwnershipLostError` and stores nothing. Needs the backend role `JobStepStore`."""
        return await self._job_steps().step(name, fn, *args, **kwargs)

    async def checkpoint(self, value: Any) -> None:
        """Store a JSON `value` with the job; `last_checkpoint` reads it back, in this run and the next."""
        await self._job_steps().checkpoint(value)

    @property
    def last_checkpoint(self) -> Any:
        """The last checkpoint this job stored (in this run or an earlier one), or None."""
        return self._job_steps().last_checkpoint

    @property
    def cancel_requested(self) -> bool:
        """True once a cancel of this job reached its worker; the handler should stop soon after.

        An ``async def`` handler needs no check (its task is cancelled); the row ends
        `cancelled`, and the attempt is not counted, however the handler then ends."""
        return self._cancel.is_set()

    def wait_for_cancel(self, timeout: float | None = None) -> bool:
        """Block the handler's thread until a cancel request arrives or `timeout` passes; True if one did.

        For a plain ``def`` handler that waits between steps: ``if ctx.wait_for_cancel(5): return``."""
        return self._cancel.wait(timeout)


def context_parameter(func: Callable[..., Any]) -> str | None:
    """The name of `func`'s parameter annotated `JobContext` (string annotations included), if any."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    hints: dict[str, Any] = {}
    for name, parameter in signature.parameters.items():
        annotation = parameter.annotation
        if annotation is JobContext:
            return name
        if isinstance(annotation, str):
            if not hints:
                try:
                    hints = get_type_hints(func)
                except Exception:
                    hints = {"": None}
            if hints.get(name) is JobContext or annotation.rsplit(".", 1)[-1] == "JobContext":
                return name
    return None
