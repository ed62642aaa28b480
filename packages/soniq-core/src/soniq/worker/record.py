"""What the worker writes to its `soniq_workers` row about its shutdown.

`mark_stopping` sets the row's status as DRAINING begins. Each transition is
written (``state``, ``state_changed_at``) in the order it happened, off the
transition's own call path: the writes are chained on one task so a slow store
delays only them, and each is bounded by `STATE_WRITE_SECONDS` so a store that
does not answer costs the shutdown nothing. `mark_stopped` ends the record:
at STOPPED it writes `last_shutdown`, built by `summary()`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from soniq.params import SetWorkerStatusParams
from soniq.records import WorkerStatus
from soniq.worker.state import WorkerState

if TYPE_CHECKING:
    from soniq.backend import QueueStore
    from soniq.worker.summary import WorkerSummary

logger = logging.getLogger("soniq.worker")

STATE_WRITE_SECONDS = 2.0


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()


class StateRecord:
    def __init__(self, backend: QueueStore, worker_id: str) -> None:
        self.backend = backend
        self.worker_id = worker_id
        self.path: list[dict[str, Any]] = [{"state": WorkerState.RUNNING.value, "at": _iso(time.time())}]
        self.waited: list[str] = []
        self._chain: asyncio.Future[None] | None = None

    def transition(self, target: WorkerState, *, reason: str, waiting_threads: Sequence[str]) -> None:
        """Note the transition and queue its write (STOPPED is written by `write_stopped`)."""
        self.path.append({"state": target.value, "at": _iso(time.time()), "reason": reason})
        self.waited.extend(job for job in waiting_threads if job not in self.waited)
        if target is WorkerState.STOPPED:
            return
        previous = self._chain
        self._chain = asyncio.ensure_future(self._write(previous, WorkerStatus.STOPPING, target.value, None))

    async def _write(
        self,
        previous: asyncio.Future[None] | None,
        status: WorkerStatus,
        state: str,
        last_shutdown: dict[str, Any] | None,
    ) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        params = SetWorkerStatusParams(
            worker_id=self.worker_id, status=status, state=state, last_shutdown=last_shutdown
        )
        try:
            await asyncio.wait_for(self.backend.set_worker_status(params), STATE_WRITE_SECONDS)
        except Exception as exc:
            logger.warning("could not record worker %s state %s: %s", self.worker_id, state, exc)

    def summary(self, summary: WorkerSummary) -> dict[str, Any]:
        """The `last_shutdown` object: plain JSON, read by operators' tools such as the dashboard."""
        waited = set(self.waited)
        unsettled = set(summary.unsettled_job_ids)
        return {
            "trigger": summary.trigger or next((p.get("reason") for p in self.path[1:2]), None),
            "states": list(self.path),
            "nacked": [
                *({"job_id": job, "reason": "shutdown_timeout"} for job in summary.nacked_job_ids),
                *({"job_id": job, "reason": "prefetch_release"} for job in summary.released_job_ids),
            ],
            "waited_threads": [{"job_id": job, "finished": job not in unsettled} for job in self.waited],
            "unsettled": sorted(unsettled | set(summary.unreleased_job_ids)),
            "stuck": list(summary.stuck_job_ids),
            "lost_threads": list(summary.lost_thread_job_ids),
            "nack_limit": list(summary.nack_limit_job_ids),
            "processed": summary.processed,
            "drained": WorkerState.FORCE_TIMEOUT_PATH.value not in {p["state"] for p in self.path} and not waited,
        }

    async def mark_stopping(self) -> None:
        params = SetWorkerStatusParams(worker_id=self.worker_id, status=WorkerStatus.STOPPING)
        try:
            await asyncio.wait_for(self.backend.set_worker_status(params), STATE_WRITE_SECONDS)
        except Exception as exc:
            logger.warning("could not mark worker %s stopping: %s", self.worker_id, exc)

    async def mark_stopped(self, summary: WorkerSummary, *, reached: WorkerState, heartbeat_timeout: float) -> None:
        """The worker's last write: `stopped`, unless rows it could not write must go to stale recovery.

        `reached` is the state the run ended in; short of STOPPED (the run failed) no `last_shutdown` is written.
        """
        left = [*summary.unsettled_job_ids, *summary.unreleased_job_ids]
        if left:
            # A `stopped` worker's rows are never swept; staying `stopping` lets its heartbeat go
            # stale so that stale recovery settles the rows this process could not write.
            logger.warning(
                "worker %s stays 'stopping': stale recovery settles the %d rows it could not write (%s) "
                "once its heartbeat is %gs old",
                self.worker_id,
                len(left),
                ", ".join(left),
                heartbeat_timeout,
            )
        status = WorkerStatus.STOPPING if left else WorkerStatus.STOPPED
        if reached is WorkerState.STOPPED:
            # After every earlier state write (each still bounded).
            await self._write(self._chain, status, WorkerState.STOPPED.value, self.summary(summary))
        elif not left:
            try:
                params = SetWorkerStatusParams(worker_id=self.worker_id, status=WorkerStatus.STOPPED)
                await asyncio.wait_for(self.backend.set_worker_status(params), STATE_WRITE_SECONDS)
            except Exception as exc:
                logger.warning("could not mark worker %s stopped: %s", self.worker_id, exc)
