"""The poisoned-job run: a normal load with jobs that hang, refuse cancellation, return what no store
can encode, or whose row cannot be decoded, on real ``soniq worker`` processes.

A backend's chaos test builds a `PoisonConfig` and awaits `run_poisoned`.
The normal jobs (quick async and sync ones from
`soniq_contract_tests.chaos.jobs`) are due in waves over `seconds`; the
poisoned ones are due among them:

- ``poison.hang_async`` awaits forever (cancellable): each attempt times out;
- ``poison.swallow_cancel`` catches every `CancelledError`: each attempt
  times out and is given up on after ``cancel_grace_seconds``, the task left
  running in the background;
- ``poison.hang_sync`` never returns while the run is judged: each attempt
  times out and leaves its thread (and pool permit) behind;
- ``poison.surrogate_result`` returns a lone surrogate;
- a corrupt row of every kind in `RAW_ARGS` (invalid JSON, nested past any
  decoder, not an object), written over a queued row's args with the
  suite's corrupt-row writer for the URL's scheme.

The verdict: every normal job done exactly once (the chaos judge, with no
faults to explain a second run), every poisoned one in the dead-letter table
with its own reason and error, nothing queued or processing, and every
worker process exits 0 on SIGTERM within a bound once the hung sync threads
are released (an abandoned task that swallows its cancellation must not
keep a process alive).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from soniq import Soniq
from soniq_contract_tests.chaos.driver import WORKER_SETTINGS, spawn_chaos_worker
from soniq_contract_tests.chaos.jobs import POISON_RETRIES, POISON_TIMEOUT, RELEASE_FILE, build_app, stored_job
from soniq_contract_tests.chaos.report import env_int
from soniq_contract_tests.chaos.verdict import PlannedJob, Verdict, judge, read_runs
from soniq_contract_tests.harness import UrlBackendFactory
from soniq_contract_tests.suite.corrupt_rows import CORRUPT_ROW_WRITERS, RAW_ARGS

__all__ = ["POISON", "PoisonConfig", "PoisonReport", "run_poisoned"]

CANCEL_GRACE = 1.0
POISON_SETTINGS = {**WORKER_SETTINGS, "SONIQ_CANCEL_GRACE_SECONDS": str(CANCEL_GRACE)}


@dataclass(frozen=True)
class Poison:
    job_name: str
    reason: str
    error: str
    """A fragment the dead-letter row's `last_error` must contain."""
    attempts: tuple[int, ...]
    """The counts its dead-letter row may show."""


POISON = {
    "poison.hang_async": Poison("poison.hang_async", "max_attempts", "timed out after", (POISON_RETRIES + 1,)),
    "poison.swallow_cancel": Poison(
        "poison.swallow_cancel", "stuck", f"did not stop within {CANCEL_GRACE:g}s", (POISON_RETRIES + 1,)
    ),
    "poison.hang_sync": Poison("poison.hang_sync", "max_attempts", "timed out after", (POISON_RETRIES + 1,)),
    "poison.surrogate_result": Poison("poison.surrogate_result", "max_attempts", "lone surrogate", (1,)),
    "corrupt_row": Poison("corrupt_row", "corrupt_row", "could not be decoded", (0, 1)),
}
# A timed-out attempt's slot is free after the deadline (plus the grace for a swallower); both
# attempts, the backoff and the claim poll fit well inside this.
POISON_SETTLE = 2 * (POISON_TIMEOUT + CANCEL_GRACE) + 5.0
EXIT_BOUND = 15.0


@dataclass
class PoisonConfig:
    url: str
    namespace: str
    directory: Path
    jobs: int = field(default_factory=lambda: env_int("SONIQ_POISON_JOBS", 300))
    seconds: float = field(default_factory=lambda: float(env_int("SONIQ_POISON_SECONDS", 6)))
    copies: int = 2
    """How many of each poisoned job (the corrupt rows: one per kind of corruption)."""
    workers: int = 2
    settle_seconds: float = 60.0
    label: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    """Extra `from_url` keywords of the backend (the namespace is added)."""


@dataclass
class PoisonReport:
    config: PoisonConfig
    verdict: Verdict
    poisoned: dict[str, str]
    """Job id -> its kind (a job name of `POISON`, or ``corrupt_row:<kind>``)."""
    ends: dict[str, str]
    """Job id of each poisoned job -> ``reason (attempts N)`` as found."""
    violations: list[str]
    settle_seconds: float
    exit_seconds: list[float]
    elapsed: float

    def figures(self) -> dict[str, Any]:
        return {
            "backend": self.config.label or urlsplit(self.config.url).scheme,
            "normal_jobs": self.config.jobs,
            "poisoned_jobs": len(self.poisoned),
            "worker_processes": self.config.workers,
            "normal_ends": dict(sorted(self.verdict.ends.items())),
            "poisoned_ends": dict(sorted(_count(self.ends.values()).items())),
            "settle_s": round(self.settle_seconds, 2),
            "longest_exit_after_sigterm_s": round(max(self.exit_seconds), 2) if self.exit_seconds else None,
            "elapsed_s": round(self.elapsed, 1),
            "violations": len(self.violations),
        }

    def text(self) -> str:
        lines = [f"poisoned-run figures ({self.config.label or self.config.url}):"]
        lines += [f"  {key}: {value}" for key, value in self.figures().items()]
        lines += [f"  VIOLATION: {v}" for v in self.violations[:30]]
        return "\n".join(lines)


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


class PoisonedRun:
    def __init__(self, config: PoisonConfig) -> None:
        self.config = config
        self.runlog = config.directory / "runs.log"
        (config.directory / "flaky").mkdir(parents=True, exist_ok=True)
        self.app: Soniq = build_app(config.url, config.namespace, observers="")
        self.factory = UrlBackendFactory(config.url, {**config.options, "namespace": config.namespace})
        self.planned: list[PlannedJob] = []
        self.poisoned: dict[str, str] = {}
        self.popens: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.violations: list[str] = []

    async def enqueue(self) -> None:
        waves = 6
        now = datetime.now(UTC)
        for wave in range(waves):
            due = now + timedelta(seconds=self.config.seconds * wave / waves)
            count = self.config.jobs // waves + (1 if wave < self.config.jobs % waves else 0)
            for name in ("chaos.async", "chaos.sync"):
                items: list[dict[str, Any]] = [
                    {"key": f"w{wave}-{name[6:]}-{n}", "seconds": round(0.002 * (n % 40), 3), "fate": "ok"}
                    for n in range(count // 2 + (count % 2 if name == "chaos.async" else 0))
                ]
                if not items:
                    continue
                ids = await self.app.enqueue_many(name, items, scheduled_at=due)
                for job_id, item in zip(ids, items, strict=True):
                    self.planned.append(PlannedJob(item["key"], job_id, name, "ok", item["seconds"]))
            # The poison lands mid-load: from the second wave on, beside normal jobs due at the same moment.
            if wave in (1, 2):
                for copy in range(self.config.copies // 2 + (self.config.copies % 2 if wave == 1 else 0)):
                    for name in POISON:
                        if name == "corrupt_row":
                            continue
                        job_id = await self.app.enqueue(name, args={"key": f"{name}-{wave}-{copy}"}, scheduled_at=due)
                        self.poisoned[job_id] = name
        await self.corrupt(now + timedelta(seconds=self.config.seconds / waves))

    async def corrupt(self, due: datetime) -> None:
        scheme = urlsplit(self.config.url).scheme.split("+", 1)[0].lower()
        make = CORRUPT_ROW_WRITERS.get(scheme)
        if make is None:
            self.violations.append(f"no corrupt-row writer registered for {scheme!r} (CORRUPT_ROW_WRITERS)")
            return
        writer = make(self.factory)
        for kind, raw in sorted(RAW_ARGS.items()):
            job_id = await self.app.enqueue(
                "chaos.async", args={"key": f"corrupt-{kind}", "seconds": 0, "fate": "ok"}, scheduled_at=due
            )
            await writer(self.app.backend, job_id, raw)
            self.poisoned[job_id] = f"corrupt_row:{kind}"

    def start_worker(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
        env.update(POISON_SETTINGS)
        env.update(
            SONIQ_CHAOS_URL=self.config.url,
            SONIQ_CHAOS_NAMESPACE=self.config.namespace,
            SONIQ_CHAOS_RUNLOG=str(self.runlog),
            PYTHONUNBUFFERED="1",
        )
        log_path = self.config.directory / f"poisoned-worker-{len(self.popens)}.log"
        popen = spawn_chaos_worker(env, log_path, cwd=self.config.directory)
        self.popens.append((popen, log_path))

    async def settle(self) -> float:
        """Until nothing is queued or processing and every poisoned job is dead-lettered."""
        started = time.monotonic()
        deadline = started + self.config.seconds + POISON_SETTLE + self.config.settle_seconds
        stats: dict[str, int] = {}
        while time.monotonic() < deadline:
            for popen, log_path in self.popens:
                if popen.poll() is not None:
                    self.violations.append(f"worker {popen.pid} exited with {popen.returncode}: {_tail(log_path)}")
                    return time.monotonic() - started
            stats = await self.app.get_queue_stats()
            if stats["queued"] == stats["processing"] == 0 and stats["dead_letter"] >= len(self.poisoned):
                return time.monotonic() - started
            await asyncio.sleep(0.2)
        self.violations.append(f"queue not settled: {stats}")
        return time.monotonic() - started

    async def judge_poisoned(self) -> dict[str, str]:
        ends: dict[str, str] = {}
        for job_id, kind in self.poisoned.items():
            expected = POISON[kind.split(":", 1)[0]]
            row = await stored_job(self.app, job_id)
            dead = await self.app.dead_letter.get(job_id)
            if dead is None:
                state = row["status"] if row else "missing"
                self.violations.append(f"poisoned {kind} ({job_id}) not dead-lettered: {state}")
                ends[job_id] = state
                continue
            reason, attempts, error = dead["dead_letter_reason"], dead["attempts"], dead["last_error"] or ""
            ends[job_id] = f"{kind}: {reason}"
            if row is not None:
                self.violations.append(f"poisoned {kind} ({job_id}) is both a job row and a dead-letter row")
            if reason != expected.reason or attempts not in expected.attempts:
                self.violations.append(
                    f"poisoned {kind} ({job_id}) dead-lettered as {reason!r} after {attempts} attempts, "
                    f"expected {expected.reason!r} after {expected.attempts}: {error[:300]!r}"
                )
            if expected.error not in error:
                self.violations.append(f"poisoned {kind} ({job_id}): last_error lacks {expected.error!r}: {error!r}")
        return ends

    def judge_logs(self) -> None:
        logs = "\n".join(path.read_text(encoding="utf-8", errors="replace") for _, path in self.popens)
        for needle, what in (
            ("did not stop within", "an abandoned async handler"),
            ("overran its timeout", "a sync thread kept past its deadline"),
        ):
            if needle not in logs:
                self.violations.append(f"no worker logged {what} ({needle!r})")
        # Failed jobs log their own tracebacks; these would be the worker's.
        for forbidden in ("internal error", "never retrieved", "Task was destroyed"):
            if forbidden in logs:
                self.violations.append(f"a worker logged {forbidden!r}")

    async def stop_workers(self) -> list[float]:
        """Release the hung sync threads, then SIGTERM every worker: each must exit 0, in bounded time."""
        (self.config.directory / RELEASE_FILE).touch()
        signalled = time.monotonic()
        for popen, _ in self.popens:
            if popen.poll() is None:
                popen.send_signal(signal.SIGTERM)
        exits: list[float] = []
        for popen, log_path in self.popens:
            remaining = max(0.1, signalled + EXIT_BOUND - time.monotonic())
            try:
                code = await asyncio.to_thread(popen.wait, remaining)
            except subprocess.TimeoutExpired:
                self.violations.append(
                    f"worker {popen.pid} still running {EXIT_BOUND:g}s after SIGTERM: {_tail(log_path)}"
                )
                popen.kill()
                await asyncio.to_thread(popen.wait, 10)
                continue
            exits.append(time.monotonic() - signalled)
            if code != 0:
                self.violations.append(f"worker {popen.pid} exited {code} after SIGTERM: {_tail(log_path)}")
        return exits

    async def run(self) -> PoisonReport:
        began = time.monotonic()
        await self.app.setup()
        try:
            await self.enqueue()
            for _ in range(self.config.workers):
                self.start_worker()
            settle_seconds = await self.settle()
            rows = {job.job_id: await stored_job(self.app, job.job_id) for job in self.planned}
            dead = {job_id: await self.app.dead_letter.get(job_id) for job_id, row in rows.items() if row is None}
            verdict = judge(self.planned, rows, dead, read_runs(self.runlog), faults=[])
            ends = await self.judge_poisoned()
            stats = await self.app.get_queue_stats()
            if stats["queued"] or stats["processing"]:
                self.violations.append(f"rows left queued or processing: {stats}")
            exits = await self.stop_workers()
            self.judge_logs()
        finally:
            for popen, _ in self.popens:
                if popen.poll() is None:
                    popen.kill()
                    popen.wait(10)
            await self.app.close()
        return PoisonReport(
            config=self.config,
            verdict=verdict,
            poisoned=dict(self.poisoned),
            ends=ends,
            violations=self.violations + verdict.violations,
            settle_seconds=settle_seconds,
            exit_seconds=exits,
            elapsed=time.monotonic() - began,
        )


def _tail(path: Path) -> str:
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-8:])


async def run_poisoned(config: PoisonConfig) -> PoisonReport:
    """Run one poisoned-job run and return its report; the caller asserts on `report.violations`."""
    return await PoisonedRun(config).run()
