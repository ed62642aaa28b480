"""Helpers of the fleet scenarios: several `soniq worker` processes started at once,
and the arithmetic the assertions read (overlapping runs, starts per rate window, the order of a
dependency graph). Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from soniq_contract_tests.process_harness import Scenario, WorkerProcess

LIMITED = {"CT_LIMITED": "1"}
"""Settings that make a worker process register the limited jobs (``SONIQ_CT_LIMITED=1``)."""


def start_workers(scenario: Scenario, count: int, *extra: str, **settings: Any) -> list[WorkerProcess]:
    """Start `count` worker processes together and wait until each has logged its start.

    They import in parallel, which on a small machine saves seconds per scenario; each is
    registered with the scenario, so its tear-down kills whatever is left."""
    env = scenario.environment(settings)
    started: list[WorkerProcess] = []
    for _ in range(count):
        path = scenario.directory / f"worker-{len(scenario.workers)}.log"
        handle = open(path, "wb")  # noqa: SIM115 - the child owns it until it exits
        popen = subprocess.Popen(
            [sys.executable, "-m", "soniq", "worker", "--jobs-modules", "soniq_contract_tests.worker_jobs", *extra],
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=scenario.directory,
        )
        handle.close()
        worker = WorkerProcess(popen=popen, stderr_path=path, started_at=time.monotonic())
        scenario.workers.append(worker)
        started.append(worker)
    for worker in started:
        worker.wait_log("started:", timeout=60)
    return started


def stop_workers(workers: Sequence[WorkerProcess], timeout: float = 20.0) -> None:
    """SIGTERM every worker, then require each to exit cleanly (code 0) within `timeout`."""
    for worker in workers:
        worker.signal()
    for worker in workers:
        code = worker.wait_exit(timeout)
        assert code == 0, f"worker exited with {code}; its log:\n{worker.log()[-4000:]}"


INTERNAL_ERROR_MARKS = ("internal error", "never retrieved", "Exception in callback", "claim failed")
"""What a worker logs when something went wrong in the worker itself (a job's own failure is not one)."""


def tracebacks(workers: Iterable[WorkerProcess]) -> list[str]:
    """The lines of the worker logs that report an internal error (never part of a passing scenario)."""
    return [line for w in workers for line in w.log().splitlines() if any(m in line for m in INTERNAL_ERROR_MARKS)]


def max_overlap(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals open at one instant; an interval ending when another starts does not overlap it."""
    events: list[tuple[float, int]] = []
    for start, end in intervals:
        assert end >= start, f"an interval ends before it starts: {(start, end)}"
        events.extend(((start, 1), (end, -1)))
    events.sort()  # at equal times, -1 (an end) sorts before +1 (a start)
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def per_window(instants: Iterable[float], period: float) -> Counter[int]:
    """How many of `instants` (epoch seconds) fall in each window of `period` seconds aligned to the epoch."""
    return Counter(math.floor(at / period) for at in instants)


def max_in_sliding_window(instants: Sequence[float], width: float) -> int:
    """The most instants inside any half-open window ``[t, t + width)``."""
    ordered = sorted(instants)
    best = 0
    first = 0
    for last, at in enumerate(ordered):
        while ordered[first] <= at - width:
            first += 1
        best = max(best, last - first + 1)
    return best


def epoch(value: Any) -> float:
    """A row's timestamp (an aware datetime) as epoch seconds."""
    assert isinstance(value, datetime), f"expected a datetime, got {value!r}"
    return value.timestamp()


def early_starts(rows: Mapping[str, Mapping[str, Any]], *, slack: float) -> list[tuple[str, str, float, float]]:
    """Every (job, dependency, job's handler start, dependency's handler end) where the job's handler
    started before its dependency's handler had ended (by more than `slack` seconds)."""
    early = []
    for job_id, row in rows.items():
        started = row["result"]["start"]
        for dependency in row["depends_on"]:
            ended = rows[dependency]["result"]["end"]
            if started + slack < ended:
                early.append((job_id, dependency, started, ended))
    return early


def claimed_early(rows: Mapping[str, Mapping[str, Any]], *, slack: float) -> list[tuple[str, str, float, float]]:
    """Every (job, dependency, row's `started_at`, dependency's handler end) where the store stamped
    the job's claim before its dependency's handler had even returned (by more than `slack`)."""
    early = []
    for job_id, row in rows.items():
        if row["started_at"] is None:
            continue
        claimed = epoch(row["started_at"])
        for dependency in row["depends_on"]:
            ended = rows[dependency]["result"]["end"]
            if claimed + slack < ended:
                early.append((job_id, dependency, claimed, ended))
    return early
