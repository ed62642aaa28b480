"""The paused queues a worker leaves out of its claims (internal).

When the backend declares `QueuePauseStore`, the worker reads the stored pauses at most once per
`poll_interval` (before a claim, when the last read is older than that) and sends the paused names
it would otherwise claim from as `ClaimJobsParams.excluded_queues`. A claim between two reads costs
nothing more. Each change is logged once on ``soniq.worker``; a failing read is logged and the last
known set kept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from soniq.backend import QueuePauseStore, has_role
from soniq.queue_pause import pause_store
from soniq.serialization import safe_text

__all__ = ["QueuePauses"]

logger = logging.getLogger("soniq.worker")


class QueuePauses:
    """The worker's view of the stored pauses, refreshed at most once per `interval` seconds."""

    def __init__(
        self,
        backend: object,
        worker_id: str,
        queues: Sequence[str] | None,
        *,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store: QueuePauseStore | None = pause_store(backend) if has_role(backend, QueuePauseStore) else None
        self._worker_id = worker_id
        self._served = tuple(queues) if queues is not None else None
        self._interval = interval
        self._clock = clock
        self._read_at: float | None = None
        self._paused: dict[str, str | None] = {}
        self._read_error: str | None = None
        self.excluded: tuple[str, ...] = ()
        """The paused queues this worker would otherwise claim from, sorted."""

    @property
    def enabled(self) -> bool:
        """Whether the backend stores pauses (else nothing is read and nothing excluded)."""
        return self._store is not None

    @property
    def all_paused(self) -> bool:
        """The worker serves a list of queues and every one of them is paused: nothing to claim."""
        return self._served is not None and bool(self._served) and len(self.excluded) == len(set(self._served))

    def unpaused(self) -> tuple[str, ...] | None:
        """The queues worth waiting on: the served list minus the paused ones (None: every queue)."""
        if self._served is None or not self.excluded:
            return self._served
        paused = set(self.excluded)
        return tuple(queue for queue in self._served if queue not in paused)

    def due_in(self) -> float:
        """Seconds until the next read is due (0 when it is due now)."""
        if self._read_at is None:
            return 0.0
        return max(0.0, self._read_at + self._interval - self._clock())

    async def refresh(self) -> tuple[str, ...]:
        """`excluded`, read again from the store first when the last read is `interval` old."""
        store = self._store
        if store is None:
            return ()
        now = self._clock()
        if self._read_at is not None and now - self._read_at < self._interval:
            return self.excluded
        self._read_at = now
        try:
            rows = await store.paused_queues()
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            if error != self._read_error:
                self._read_error = error
                logger.warning(
                    "worker %s: reading the paused queues failed (%s); keeping the last known set (%s)",
                    self._worker_id,
                    safe_text(error),
                    ", ".join(sorted(self._paused)) or "none",
                )
            return self.excluded
        if self._read_error is not None:
            self._read_error = None
            logger.info("worker %s: reading the paused queues works again", self._worker_id)
        self._apply({row.queue: row.reason for row in rows})
        return self.excluded

    def _apply(self, paused: dict[str, str | None]) -> None:
        served = set(self._served) if self._served is not None else None
        before = self._paused
        for queue in sorted(paused):
            if queue not in before and (served is None or queue in served):
                reason = paused[queue]
                logger.info(
                    "worker %s: queue %s paused (reason: %s); not claiming from it",
                    self._worker_id,
                    safe_text(queue),
                    safe_text(reason) if reason else "none given",
                )
        for queue in sorted(before):
            if queue not in paused and (served is None or queue in served):
                logger.info("worker %s: queue %s resumed", self._worker_id, safe_text(queue))
        self._paused = paused
        self.excluded = tuple(sorted(queue for queue in paused if served is None or queue in served))
