"""The watchdog: a warning for every run that holds its slot far too long (internal).

A run past its deadline, or one without a deadline held longer than
`LONG_HELD_SECONDS`, is logged (again every `LONG_HELD_SECONDS` while it
stays) and listed in `WorkerSummary.long_held_job_ids`. It only reads the run
table on its own timer, so a job's hot path pays nothing for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from soniq.worker._runs import JobRun
    from soniq.worker._table import RunTable
    from soniq.worker.summary import WorkerSummary

logger = logging.getLogger("soniq.worker")

LONG_HELD_SECONDS = 60.0
"""A run without a deadline holding its slot longer than this is logged (again every this many seconds)."""
WATCH_SECONDS = 5.0
"""The watchdog looks at most this long apart (sooner with a shorter heartbeat interval)."""


class Watchdog:
    def __init__(self, runs: RunTable, summary: WorkerSummary) -> None:
        self._runs = runs
        self._summary = summary
        # Keyed by the run, not the job id: a row claimed again later is a new run and is judged afresh.
        self._logged: dict[JobRun, float] = {}

    async def watch(self, interval: float) -> None:
        while True:
            await asyncio.sleep(min(WATCH_SECONDS, interval))
            self.check()

    def check(self) -> None:
        """Log every run that has held its slot far too long (past its deadline, or long without one)."""
        now = time.monotonic()
        runs = self._runs.runs()
        if self._logged:
            # Runs that ended since the last look are forgotten here rather than on the job's own path.
            live = set(runs)
            self._logged = {run: at for run, at in self._logged.items() if run in live}
        for run in runs:
            if not run.holds_slot or not run.started_at:
                continue
            age = now - run.started_at
            limit = run.timeout if run.timeout is not None else LONG_HELD_SECONDS
            last = self._logged.get(run)
            if age < limit or (last is not None and now - last < LONG_HELD_SECONDS):
                continue
            self._logged[run] = now
            if run.job.id not in self._summary.long_held_job_ids:
                self._summary.long_held_job_ids.append(run.job.id)
            logger.warning(
                "job %s (%s) has held its slot for %.0fs (%s); %d of %d slots are busy",
                run.job.id,
                run.job.job_name,
                age,
                f"deadline {run.timeout:g}s" if run.timeout is not None else "no job_timeout set",
                sum(1 for r in runs if r.holds_slot),
                self._runs.concurrency,
            )
