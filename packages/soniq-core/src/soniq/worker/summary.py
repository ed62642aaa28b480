"""`WorkerSummary`: what a finished worker run did, as `Worker.run()` and `app.run_worker()` return it."""

from __future__ import annotations

from dataclasses import dataclass, field

from soniq.worker.state import WorkerState


@dataclass
class WorkerSummary:
    """What a finished worker run did."""

    worker_id: str
    final_state: WorkerState
    states: list[WorkerState] = field(default_factory=list)
    processed: int = 0
    nacked_job_ids: list[str] = field(default_factory=list)
    released_job_ids: list[str] = field(default_factory=list)
    unreleased_job_ids: list[str] = field(default_factory=list)
    unsettled_job_ids: list[str] = field(default_factory=list)
    """Rows whose outcome or nack could not be written: they stay `processing` for stale recovery."""
    stuck_job_ids: list[str] = field(default_factory=list)
    """Async handlers that would not stop after cancellation, left running in the background."""
    lost_thread_job_ids: list[str] = field(default_factory=list)
    """Sync handlers whose thread overran the job's deadline (the thread kept its pool permit)."""
    nack_limit_job_ids: list[str] = field(default_factory=list)
    """Rows whose started handler shutdowns had already cut off `max_shutdown_nacks` times: moved to the
    dead-letter table (reason ``nack_limit``) instead of being nack'd once more."""
    long_held_job_ids: list[str] = field(default_factory=list)
    """Runs logged for holding a slot past their deadline, or long without one."""
    trigger: str | None = None
    failed_loop: str | None = None
    """The internal loop that kept failing past `loop_failure_limit` and stopped the worker."""

    @property
    def forced(self) -> bool:
        return WorkerState.FORCE_TIMEOUT_PATH in self.states
