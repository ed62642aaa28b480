"""The run table: the one owner of the worker's slots and prefetch buffer (internal).

The claim loop fills it, each run's task empties it, and the shutdown
sequence reads and drains it; none of them keeps its own count.
"""

from __future__ import annotations

import asyncio
from collections import deque

from soniq.outcomes import HandlerKind
from soniq.worker._runs import JobRun
from soniq.worker.state import RunPhase


class RunTable:
    def __init__(self, *, concurrency: int, prefetch: int) -> None:
        self.concurrency = concurrency
        self.prefetch = prefetch
        self._active: dict[str, JobRun] = {}
        """Every run with a slot, from its start to its last write (outcome writes included)."""
        self._running = 0
        """Runs holding a slot: started and not yet returned from their handler."""
        self._buffer: deque[JobRun] = deque()
        self.changed = asyncio.Event()
        """Set whenever a slot frees, a run ends or `stop()` is called (waiters clear it before looking)."""
        self.added = asyncio.Event()
        """Set whenever a claimed row joins the table (the cancel watcher widens its wait on it)."""

    # -- reading -------------------------------------------------------------

    @property
    def room(self) -> int:
        """How many more rows a claim may take: free slots plus free buffer places."""
        return (self.concurrency - self._running) + self.prefetch - len(self._buffer)

    @property
    def has_free_slot(self) -> bool:
        return self._running < self.concurrency

    @property
    def empty(self) -> bool:
        return not self._active and not self._buffer

    def get(self, job_id: str) -> JobRun | None:
        return self._active.get(job_id)

    def runs(self, *, include_abandoned: bool = True) -> list[JobRun]:
        return [r for r in self._active.values() if include_abandoned or not r.abandoned]

    def pinned(self) -> list[JobRun]:
        return [r for r in self._active.values() if r.pinned]

    def count(self, kind: HandlerKind) -> int:
        return sum(1 for r in self._active.values() if r.kind is kind)

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def job_ids(self) -> list[str]:
        """Every row this worker holds: slots, outcome writes and the prefetch buffer."""
        return [*self._active, *(run.job.id for run in self._buffer)]

    def buffered_run(self, job_id: str) -> JobRun | None:
        return next((run for run in self._buffer if run.job.id == job_id), None)

    # -- writing -------------------------------------------------------------

    def occupy(self, run: JobRun) -> None:
        run.phase = RunPhase.CLAIMED
        run.holds_slot = True
        self._active[run.job.id] = run
        self._running += 1
        self.added.set()

    def adopt(self, run: JobRun) -> None:
        """Track a row that writes its outcome without ever taking a slot (a cancel before it started)."""
        self._active[run.job.id] = run

    def hold(self, run: JobRun) -> None:
        """Keep a claimed row in the buffer until a slot frees (or shutdown hands it back)."""
        run.phase = RunPhase.BUFFERED
        self._buffer.append(run)
        self.added.set()

    def next_buffered(self) -> JobRun | None:
        return self._buffer.popleft() if self._buffer else None

    def unbuffer(self, run: JobRun) -> bool:
        """Take one run out of the buffer; False when it is no longer there."""
        try:
            self._buffer.remove(run)
        except ValueError:
            return False
        return True

    def take_buffer(self) -> list[JobRun]:
        runs = list(self._buffer)
        self._buffer.clear()
        return runs

    def release_slot(self, run: JobRun) -> bool:
        """The handler is done with its slot; True when this call freed it."""
        if not run.holds_slot:
            return False
        run.holds_slot = False
        self._running -= 1
        self.changed.set()
        return True

    def finish(self, run: JobRun) -> None:
        run.phase = RunPhase.FINISHED
        self.release_slot(run)
        self._active.pop(run.job.id, None)
        self.changed.set()
