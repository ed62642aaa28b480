"""The verdict of a chaos run: every job's end, its runs, and who explains each extra run.

Inputs are what a user could inspect: the job and dead-letter rows, the
handlers' own run log (see `soniq_contract_tests.chaos.jobs`), and the list
of faults the driver injected with their wall-clock times.

A run is the interval between a handler's ``S`` line and its ``E`` line from
the same process; a start with no end was interrupted. Runs of one job are
taken in start order. The run after a failed run is the retry the handler
asked for. Any other later run is a duplicate, and it must be explained by a
fault that hit the earlier run: a SIGKILL of its process after it started, a
connection kill while it was in flight or before its outcome could be
written, a sweep that judged its live worker stale (read from the workers'
logs: its rows were requeued and its writes fenced), or (async handlers only)
a SIGTERM whose FORCE_TIMEOUT_PATH cancelled it and nack'd the row. A sync run is never explained by SIGTERM
alone: the seed contract never nacks a sync row.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soniq_contract_tests.chaos.jobs import MAX_RETRIES

MAX_ATTEMPTS = MAX_RETRIES + 1


@dataclass(frozen=True)
class PlannedJob:
    key: str
    job_id: str
    job_name: str
    fate: str
    seconds: float

    @property
    def is_async(self) -> bool:
        return self.job_name == "chaos.async"


@dataclass(frozen=True)
class Fault:
    kind: str
    """``sigterm``, ``sigterm_twice``, ``sigkill``, ``supervisor_sigkill`` or ``connection_kill``, all
    injected; or ``stale_judgment``, read from the workers' logs: a sweep declared a live worker stale."""
    at: float
    pid: int | None = None
    """None for a connection kill: it hits every process of the namespace."""
    until: float | None = None
    """When a fault that lasts ended: a Redis Cluster master failover is asked for again until the
    replica takes over, and on a loaded machine that takes seconds of intermittent outage."""

    @property
    def ended(self) -> float:
        return self.at if self.until is None else self.until


@dataclass
class Run:
    pid: int
    start: float
    end: float | None = None
    outcome: str | None = None
    """``ok``, ``fail``, or None when the run was interrupted."""


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)
    duplicates: Counter[str] = field(default_factory=Counter)
    ends: Counter[str] = field(default_factory=Counter)
    runs: int = 0
    interrupted_runs: int = 0
    lost: int = 0
    recoveries: list[float] = field(default_factory=list)
    """Seconds from each SIGKILL to the next start (or dead letter) of every job it interrupted."""

    def fail(self, message: str) -> None:
        self.violations.append(message)


def read_runs(runlog: Path) -> dict[str, list[Run]]:
    """Every job's runs in start order, each end matched to its own process's open start."""
    runs: dict[str, list[Run]] = defaultdict(list)
    open_runs: dict[tuple[str, int], list[Run]] = defaultdict(list)
    if not runlog.exists():
        return runs
    lines = [line.split(" ") for line in runlog.read_text(encoding="utf-8").splitlines() if line]
    # Appends from several processes land in write order, which is nearly but not exactly time order.
    lines.sort(key=lambda parts: float(parts[3]))
    for parts in lines:
        kind, key, pid, at = parts[0], parts[1], int(parts[2]), float(parts[3])
        if kind == "S":
            run = Run(pid=pid, start=at)
            runs[key].append(run)
            open_runs[(key, pid)].append(run)
        elif kind == "E" and open_runs[(key, pid)]:
            run = open_runs[(key, pid)].pop()
            run.end, run.outcome = at, parts[4]
    return runs


def _explain(previous: Run, following: Run, job: PlannedJob, faults: list[Fault]) -> str | None:
    """Which fault explains `following` re-running the job after `previous`, if any."""
    for fault in faults:
        if fault.ended < previous.start or fault.at > following.start:
            continue
        if fault.kind in ("sigkill", "supervisor_sigkill") and fault.pid == previous.pid:
            return "sigkill"
        if fault.kind == "connection_kill":
            return "connection_kill"
        if fault.kind == "stale_judgment" and fault.pid == previous.pid:
            return "stale_judgment"
    if previous.outcome is None and job.is_async:
        for fault in faults:
            if fault.kind in ("sigterm", "sigterm_twice") and fault.pid == previous.pid and fault.at <= following.start:
                return "force_path_cancel"
    return None


def _hit_after_start(run: Run, faults: list[Fault]) -> bool:
    return any(
        fault.ended >= run.start
        and (
            fault.kind == "connection_kill"
            or (fault.kind in ("sigkill", "supervisor_sigkill") and fault.pid == run.pid)
        )
        for fault in faults
    )


def judge(
    jobs: list[PlannedJob],
    rows: dict[str, dict[str, Any] | None],
    dead: dict[str, dict[str, Any] | None],
    runs: dict[str, list[Run]],
    faults: list[Fault],
) -> Verdict:
    verdict = Verdict()
    kills = [f for f in faults if f.kind in ("sigkill", "supervisor_sigkill")]
    for job in jobs:
        row, dead_row = rows.get(job.job_id), dead.get(job.job_id)
        job_runs = runs.get(job.key, [])
        verdict.runs += len(job_runs)
        verdict.interrupted_runs += sum(1 for r in job_runs if r.outcome is None)
        _judge_end(verdict, job, row, dead_row, job_runs, faults)
        _judge_runs(verdict, job, job_runs, faults)
        for kill in kills:
            for index, run in enumerate(job_runs):
                if run.pid == kill.pid and run.start <= kill.at and (run.end is None or run.end >= kill.at):
                    later = [r.start for r in job_runs[index + 1 :] if r.start >= kill.at]
                    if later:
                        verdict.recoveries.append(later[0] - kill.at)
                    elif dead_row is not None:
                        verdict.recoveries.append(dead_row["moved_to_dead_letter_at"].timestamp() - kill.at)
    return verdict


def _judge_end(
    verdict: Verdict,
    job: PlannedJob,
    row: dict[str, Any] | None,
    dead_row: dict[str, Any] | None,
    job_runs: list[Run],
    faults: list[Fault],
) -> None:
    if row is not None and dead_row is not None:
        verdict.fail(f"{job.key} ({job.job_id}) is both a job row and a dead-letter row")
    if row is None and dead_row is None:
        verdict.lost += 1
        verdict.fail(f"{job.key} ({job.job_id}) vanished: no job row and no dead-letter row")
        return
    if row is not None:
        attempts, status = row["attempts"], row["status"]
        if status != "done":
            verdict.lost += 1
            verdict.fail(f"{job.key} ({job.job_id}) ended {status!r}, not done or dead-lettered")
            return
        verdict.ends["done"] += 1
        if job.fate == "fail":
            verdict.fail(f"{job.key}: a handler that always fails ended done")
        if row["result"] != {"key": job.key}:
            verdict.fail(f"{job.key}: done with result {row['result']!r}")
        if not any(r.outcome == "ok" for r in job_runs):
            verdict.fail(f"{job.key}: done, but no run of its handler returned")
        if job.fate == "flaky" and attempts < 1:
            verdict.fail(f"{job.key}: flaky job done with attempts {attempts}, its failure was not counted")
    else:
        assert dead_row is not None
        attempts, reason = dead_row["attempts"], dead_row["dead_letter_reason"]
        verdict.ends[f"dead_letter:{reason}"] += 1
        if reason == "max_attempts":
            if job.fate != "fail" and not (job.fate == "flaky" and attempts >= 1):
                verdict.fail(f"{job.key}: {job.fate} job dead-lettered for max_attempts")
            if "chaos failure" not in (dead_row["last_error"] or ""):
                verdict.fail(f"{job.key}: dead-lettered with last_error {dead_row['last_error']!r}")
        elif reason == "worker_lost":
            # A run is lost with its worker when the process died during it or after it returned but
            # before its outcome was written: a kill (or a lost connection) at or after its start.
            if not any(_hit_after_start(run, faults) for run in job_runs):
                verdict.fail(f"{job.key}: dead-lettered as worker_lost but no fault hit any of its runs")
        else:
            verdict.fail(f"{job.key}: unexpected dead-letter reason {reason!r}")
        if attempts != MAX_ATTEMPTS:
            verdict.fail(f"{job.key}: dead-lettered after {attempts} attempts, the budget is {MAX_ATTEMPTS}")
    if attempts > MAX_ATTEMPTS:
        verdict.fail(f"{job.key}: attempts {attempts} exceed the budget of {MAX_ATTEMPTS}")
    failed_runs = sum(1 for r in job_runs if r.outcome == "fail")
    if failed_runs > MAX_ATTEMPTS:
        verdict.fail(f"{job.key}: its handler failed {failed_runs} times, the budget is {MAX_ATTEMPTS}")
    if attempts < failed_runs:
        verdict.fail(f"{job.key}: {failed_runs} failed runs but only {attempts} attempts counted")


def _judge_runs(verdict: Verdict, job: PlannedJob, job_runs: list[Run], faults: list[Fault]) -> None:
    for previous, following in itertools.pairwise(job_runs):
        if previous.outcome == "fail":
            continue
        why = _explain(previous, following, job, faults)
        if why is None:
            state = "returned" if previous.outcome == "ok" else "was interrupted"
            verdict.fail(
                f"{job.key} ({job.job_name}): ran again at {following.start:.3f} in pid {following.pid} after a run "
                f"in pid {previous.pid} that {state}, and no fault explains it"
            )
            verdict.duplicates["unexplained"] += 1
        else:
            verdict.duplicates[why] += 1
