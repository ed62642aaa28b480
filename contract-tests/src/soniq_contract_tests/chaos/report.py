"""What a chaos run is configured with and what it reports: the figures docs/reliability.md publishes."""

from __future__ import annotations

import json
import os
import random
import re
import statistics
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from soniq_contract_tests.chaos.verdict import Fault, Verdict

ConnectionKiller = Callable[[], Awaitable[int]]

SWEEP_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) WARNING soniq.worker: stale recovery: workers (.+?); requeued"
)
"""A sweep's line in a worker's log; the worker ids are joined with ", " (soniq.worker.loops.sweep_once)."""
STALE_LOG_LAG = 0.5
"""How far a sweep's log line may be from the moment it fenced a live worker's rows, either way.
The sweeper logs after its writes returned, so a re-run elsewhere can start before the line; and the
judged worker may log a handler's start just after the sweep, for a row it had claimed and marked
started before it (the start line follows the start mark by the worker's own scheduling delay)."""


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


@dataclass
class ChaosConfig:
    url: str
    namespace: str
    directory: Path
    jobs: int = field(default_factory=lambda: env_int("SONIQ_CHAOS_JOBS", 1000))
    seconds: float = field(default_factory=lambda: float(env_int("SONIQ_CHAOS_SECONDS", 30)))
    workers: int = 3
    seed: int = field(default_factory=lambda: env_int("SONIQ_CHAOS_SEED", random.randrange(1_000_000)))
    kill_connections: ConnectionKiller | None = None
    settle_seconds: float = 60.0
    label: str = ""


@dataclass
class ChaosReport:
    config: ChaosConfig
    verdict: Verdict
    faults: Counter[str]
    violations: list[str]
    samples: int
    failed_starts: int
    """Workers that exited 1 at start-up because a connection kill hit their first queries."""
    sweep_recoveries: list[float]
    """Seconds from each SIGKILL to the sweep (in another worker) that settled the dead worker's rows."""
    settle_seconds: float
    worker_processes: int
    elapsed: float

    def figures(self) -> dict[str, Any]:
        recoveries = self.verdict.recoveries
        sweeps = self.sweep_recoveries
        return {
            "backend": self.config.label or self.config.url.split(":", 1)[0],
            "seed": self.config.seed,
            "jobs": self.config.jobs,
            "fault_seconds": self.config.seconds,
            "worker_processes": self.worker_processes,
            "faults": dict(sorted(self.faults.items())),
            "ends": dict(sorted(self.verdict.ends.items())),
            "handler_runs": self.verdict.runs,
            "interrupted_runs": self.verdict.interrupted_runs,
            "lost": self.verdict.lost,
            "duplicate_runs": dict(sorted(self.verdict.duplicates.items())),
            "failed_starts": self.failed_starts,
            "stats_samples": self.samples,
            "longest_recovery_s": round(max(sweeps), 2) if sweeps else None,
            "median_recovery_s": round(statistics.median(sweeps), 2) if sweeps else None,
            "longest_kill_to_rerun_s": round(max(recoveries), 2) if recoveries else None,
            "median_kill_to_rerun_s": round(statistics.median(recoveries), 2) if recoveries else None,
            "settle_after_faults_s": round(self.settle_seconds, 2),
            "elapsed_s": round(self.elapsed, 1),
            "violations": len(self.violations),
        }

    def text(self) -> str:
        lines = [f"chaos figures ({self.config.label or self.config.url}):"]
        lines += [f"  {key}: {value}" for key, value in self.figures().items()]
        lines += [f"  VIOLATION: {v}" for v in self.violations[:30]]
        return "\n".join(lines)


def _sweeps(logs: list[str]) -> list[tuple[float, int | None]]:
    """Every (time, pid) a sweep in some worker's log declared stale; worker ids are hostname-pid-suffix."""
    found = []
    for log in logs:
        for line in log.splitlines():
            match = SWEEP_LINE.match(line)
            if match is None:
                continue
            swept_at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            for stale in match.group(2).split(","):
                parts = stale.strip().rsplit("-", 2)
                found.append((swept_at, int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None))
    return found


def stale_judgments(logs: list[str], faults: list[Fault]) -> list[Fault]:
    """Live workers that a sweep judged stale (their heartbeat came late on a loaded machine, or a
    connection fault held it up), as faults of kind ``stale_judgment``: the sweep requeues their rows
    and fences their writes, so a run of theirs that then returns is run again elsewhere, which
    the verdict counts under that name instead of as unexplained. A sweep of a worker after it was
    SIGKILLed is not one (the kill explains that re-run); a sweep that judged it stale while it was
    still alive is, even when it was killed later in the run."""
    killed_at = {f.pid: f.at for f in faults if f.kind in ("sigkill", "supervisor_sigkill")}
    return [
        Fault("stale_judgment", at - STALE_LOG_LAG, pid, until=at + STALE_LOG_LAG)
        for at, pid in _sweeps(logs)
        if pid is not None and (pid not in killed_at or at < killed_at[pid] + STALE_LOG_LAG)
    ]


def sweep_recoveries(logs: list[str], faults: list[Fault]) -> list[float]:
    """From the workers' logs: how long after each SIGKILL a sweep (in another worker) settled its rows."""
    killed_at = {f.pid: f.at for f in faults if f.kind in ("sigkill", "supervisor_sigkill")}
    return [swept_at - killed_at[pid] for swept_at, pid in _sweeps(logs) if pid in killed_at]


def save_figures(report: ChaosReport, path: Path) -> None:
    """Write the figures beside the run's logs, and append them to ``SONIQ_CHAOS_REPORT`` when set."""
    path.write_text(json.dumps(report.figures(), indent=2), encoding="utf-8")
    destination = os.environ.get("SONIQ_CHAOS_REPORT")
    if destination:
        with open(destination, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(report.figures()) + "\n")
