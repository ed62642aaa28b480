"""The chaos driver: thousands of jobs, several real ``soniq worker`` processes, faults for a bounded time.

A backend's chaos test builds a `ChaosConfig` and awaits `run_chaos`. The
driver enqueues the planned jobs (mixed async and sync, random durations,
some that always fail and some that fail once), spread over the fault window
with `scheduled_at` so the workers stay busy while faults land; keeps
`workers` processes serving; and until the window ends injects one fault at a
time: SIGTERM (and a replacement), a double SIGTERM, SIGKILL (and a
replacement), and, when the config gives a `kill_connections` hook, the
server-side termination of every connection of the namespace. Meanwhile it
samples queue stats and looks for rows stuck in `processing`. When the window
closes it waits for the queue to settle, stops every worker with SIGTERM and
hands everything to `soniq_contract_tests.chaos.verdict.judge`.

Sizes come from ``SONIQ_CHAOS_JOBS`` and ``SONIQ_CHAOS_SECONDS`` when set.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from soniq import Soniq
from soniq.errors import BackendUnavailableError
from soniq_contract_tests.chaos.jobs import build_app, stored_job
from soniq_contract_tests.chaos.report import (
    ChaosConfig,
    ChaosReport,
    save_figures,
    stale_judgments,
    sweep_recoveries,
)
from soniq_contract_tests.chaos.verdict import Fault, PlannedJob, judge, read_runs

__all__ = ["ChaosConfig", "ChaosReport", "ChaosRun", "run_chaos"]

WORKER_SETTINGS = {
    "SONIQ_HEARTBEAT_INTERVAL": "0.4",
    "SONIQ_HEARTBEAT_TIMEOUT": "1.6",
    "SONIQ_SHUTDOWN_TIMEOUT": "1.0",
    "SONIQ_SYNC_HANDLER_GRACE_SECONDS": "1.0",
    "SONIQ_PREFETCH_RELEASE_TIMEOUT": "1.0",
    "SONIQ_POLL_INTERVAL": "0.05",
    "SONIQ_RETRY_BACKOFF_BASE": "0.05",
    "SONIQ_RETRY_BACKOFF_MAX": "0.2",
    "SONIQ_CONCURRENCY": "8",
    "SONIQ_OBSERVERS": "",
}
LONGEST_JOB = 2.0
# The longest a SIGTERM'd worker may take: drain, the sync grace, a sync thread of LONGEST_JOB, the
# nack and write budgets, and start-up slack on a loaded 2-core machine.
EXIT_BOUND = 1.0 + 1.0 + LONGEST_JOB + 4.0 + 1.0 + 8.0
# A processing row older than this (by its updated_at) is stuck: heartbeat_timeout plus a sweep
# interval, the longest job and the shutdown budgets, with slack.
STUCK_AFTER = 1.6 + 0.8 + LONGEST_JOB + 2.0 + 8.0


def spawn_chaos_worker(env: dict[str, str], log_path: Path, *, cwd: Path) -> subprocess.Popen[bytes]:
    """A real `soniq worker` on the chaos jobs module, its stdout and stderr in `log_path`."""
    with open(log_path, "wb") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "soniq", "worker", "--jobs-modules", "soniq_contract_tests.chaos.jobs"],
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=cwd,
        )


@dataclass
class ChaosWorker:
    popen: subprocess.Popen[bytes]
    log_path: Path
    prefetch: int
    terminated_at: float | None = None
    killed: bool = False
    ready: bool = False
    judged: bool = False
    """Its exit has been checked."""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


class ChaosRun:
    def __init__(self, config: ChaosConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.runlog = config.directory / "runs.log"
        (config.directory / "flaky").mkdir(parents=True, exist_ok=True)
        self.workers: list[ChaosWorker] = []
        self.faults: list[Fault] = []
        self._fault_kinds_left: list[str] = []
        self._weighted_draws = False
        self.violations: list[str] = []
        self.samples = 0
        self.failed_starts = 0
        self.planned: list[PlannedJob] = []
        self.app: Soniq = build_app(config.url, config.namespace, observers="")

    # -- the plan ----------------------------------------------------------

    def _job_args(self, index: int) -> dict[str, Any]:
        roll = self.rng.random()
        seconds = (
            self.rng.uniform(0.0, 0.15)
            if roll < 0.9
            else self.rng.uniform(0.3, 1.0)
            if roll < 0.98
            else self.rng.uniform(1.2, LONGEST_JOB)
        )
        fate_roll = self.rng.random()
        fate = "fail" if fate_roll < 0.05 else "flaky" if fate_roll < 0.13 else "ok"
        return {"key": f"j{index}", "seconds": round(seconds, 3), "fate": fate}

    async def enqueue_plan(self) -> None:
        """Enqueue every job now, due in waves across 70% of the fault window."""
        waves = 12
        now = datetime.now(UTC)
        index = 0
        for wave in range(waves):
            due = now + timedelta(seconds=self.config.seconds * 0.7 * wave / waves)
            count = self.config.jobs // waves + (1 if wave < self.config.jobs % waves else 0)
            by_name: dict[str, list[dict[str, Any]]] = {"chaos.async": [], "chaos.sync": []}
            for _ in range(count):
                by_name["chaos.async" if self.rng.random() < 0.5 else "chaos.sync"].append(self._job_args(index))
                index += 1
            for name, items in by_name.items():
                if not items:
                    continue
                ids = await self.app.enqueue_many(name, items, scheduled_at=due)
                for job_id, item in zip(ids, items, strict=True):
                    self.planned.append(PlannedJob(item["key"], job_id, name, item["fate"], item["seconds"]))

    # -- worker processes ----------------------------------------------------

    def start_worker(self) -> ChaosWorker:
        prefetch = self.rng.choice((0, 0, 2))
        env = dict(os.environ)
        env.pop("SONIQ_DATABASE_URL", None)
        env.update(WORKER_SETTINGS)
        env.update(
            SONIQ_PREFETCH=str(prefetch),
            SONIQ_CHAOS_URL=self.config.url,
            SONIQ_CHAOS_NAMESPACE=self.config.namespace,
            SONIQ_CHAOS_RUNLOG=str(self.runlog),
            PYTHONUNBUFFERED="1",
        )
        log_path = self.config.directory / f"worker-{len(self.workers)}.log"
        popen = spawn_chaos_worker(env, log_path, cwd=self.config.directory)
        worker = ChaosWorker(popen=popen, log_path=log_path, prefetch=prefetch)
        self.workers.append(worker)
        return worker

    def alive(self) -> list[ChaosWorker]:
        return [w for w in self.workers if w.popen.poll() is None]

    def serving(self) -> list[ChaosWorker]:
        return [w for w in self.alive() if w.terminated_at is None and not w.killed]

    def check_workers(self) -> None:
        """Note readiness, exits that break the contract, and drains that overrun their bound."""
        now = time.time()
        for worker in self.workers:
            code = worker.popen.poll()
            if not worker.ready and code is None and "started:" in worker.log():
                worker.ready = True
            if code is None:
                if worker.terminated_at is not None and now - worker.terminated_at > EXIT_BOUND:
                    self.violations.append(
                        f"worker {worker.pid} still running {now - worker.terminated_at:.1f}s after SIGTERM "
                        f"(bound {EXIT_BOUND:g}s); killing it as a supervisor would"
                    )
                    self._kill(worker, "supervisor_sigkill")
                continue
            if worker.judged:
                continue
            worker.judged = True
            if worker.killed:
                continue
            if worker.terminated_at is not None and code == 0:
                continue
            if worker.terminated_at is not None and not worker.ready and code == -signal.SIGTERM:
                continue  # stopped while still importing: no handler yet, nothing claimed
            if not worker.ready and code == 1 and self._start_cut_by_connection_kill(worker):
                self.failed_starts += 1
                continue
            tail = "\n".join(worker.log().splitlines()[-5:])
            self.violations.append(f"worker {worker.pid} exited with code {code} unasked or uncleanly: {tail}")

    def _start_cut_by_connection_kill(self, worker: ChaosWorker) -> bool:
        """A start-up query lost to a connection kill (or, on a Redis Cluster, to a master failover
        in progress) ends the process with one line (its supervisor restarts it); that is the
        documented behaviour, not a violation."""
        errors = [line for line in worker.log().splitlines() if line.startswith("soniq: error:")]
        return (
            len(errors) == 1
            and ("lost the connection" in errors[0] or "is unavailable" in errors[0])
            and any(f.kind == "connection_kill" for f in self.faults)
        )

    def keep_serving(self) -> None:
        for _ in range(self.config.workers - len(self.serving())):
            self.start_worker()

    def _kill(self, worker: ChaosWorker, kind: str) -> None:
        worker.killed = True
        worker.popen.send_signal(signal.SIGKILL)
        self.faults.append(Fault(kind, time.time(), worker.pid))

    def _next_fault_kind(self) -> str:
        """Each kind once, in a random order, before any weighted draw: a run slowed down enough to
        inject only a few faults still has one of each (a verdict on SIGKILLs needs a SIGKILL)."""
        if not self._fault_kinds_left and not self._weighted_draws:
            distinct = ["sigterm", "sigterm_twice", "sigkill"]
            if self.config.kill_connections is not None:
                distinct.append("connection_kill")
            self.rng.shuffle(distinct)
            self._fault_kinds_left = distinct
            self._weighted_draws = True
        if self._fault_kinds_left:
            return self._fault_kinds_left.pop()
        kinds = ["sigterm", "sigterm", "sigterm_twice", "sigkill", "sigkill"]
        if self.config.kill_connections is not None:
            kinds += ["connection_kill", "connection_kill"]
        return self.rng.choice(kinds)

    async def inject(self) -> None:
        kind = self._next_fault_kind()
        if kind == "connection_kill":
            assert self.config.kill_connections is not None
            began = time.time()
            killed = await self.config.kill_connections()
            self.faults.append(Fault(kind, began, until=time.time()))
            if killed == 0:
                self.violations.append("a connection kill found no connection of the namespace to terminate")
            return
        # Faults land on workers that are running jobs; one still importing has nothing to lose.
        candidates = [w for w in self.serving() if w.ready]
        if not candidates:
            self._fault_kinds_left.append(kind)  # owed: the next fault is this kind
            return
        worker = self.rng.choice(candidates)
        if kind == "sigkill":
            self._kill(worker, kind)
        else:
            worker.terminated_at = time.time()
            worker.popen.send_signal(signal.SIGTERM)
            self.faults.append(Fault(kind, worker.terminated_at, worker.pid))
            if kind == "sigterm_twice":
                await asyncio.sleep(self.rng.uniform(0.05, 0.5))
                if worker.popen.poll() is None:
                    worker.popen.send_signal(signal.SIGTERM)
        self.keep_serving()

    # -- observation -----------------------------------------------------------

    async def _sample_once(self) -> dict[str, int] | None:
        try:
            stats = await self.app.get_queue_stats()
        except BackendUnavailableError:
            return None
        self.samples += 1
        parts = sum(stats[k] for k in ("queued", "processing", "done", "dead_letter", "cancelled"))
        if stats["total"] != parts or stats["total"] != len(self.planned):
            self.violations.append(f"queue stats do not add up to {len(self.planned)} jobs: {stats}")
        return stats

    async def _stuck_rows(self) -> list[str]:
        try:
            rows = await self.app.list_jobs(status="processing", limit=10_000)
        except BackendUnavailableError:
            return []
        # A connection fault holds every write back while it lasts (a cluster failover can take
        # seconds): a row's age counts from the end of the last one, not from before it.
        outages = [f.ended for f in self.faults if f.kind == "connection_kill"]
        if outages and time.time() - max(outages) < STUCK_AFTER:
            return []
        cutoff = datetime.now(UTC) - timedelta(seconds=STUCK_AFTER)
        return [f"{r['id']} ({r['args'].get('key')})" for r in rows if r["updated_at"] < cutoff]

    async def sample(self, stop: asyncio.Event) -> None:
        rounds = 0
        while not stop.is_set():
            await self._sample_once()
            rounds += 1
            if rounds % 5 == 0:
                for stuck in await self._stuck_rows():
                    self.violations.append(f"row {stuck} processing for more than {STUCK_AFTER:g}s")
            await asyncio.sleep(0.2)

    async def settle(self) -> float:
        """Wait until nothing is queued or processing; returns how long that took."""
        started = time.monotonic()
        deadline = started + self.config.settle_seconds
        while time.monotonic() < deadline:
            self.check_workers()
            self.keep_serving()
            stats = await self._sample_once()
            if stats is not None and stats["queued"] == 0 and stats["processing"] == 0:
                return time.monotonic() - started
            await asyncio.sleep(0.2)
        stats = await self._sample_once()
        self.violations.append(f"queue not settled {self.config.settle_seconds:g}s after the faults: {stats}")
        return time.monotonic() - started

    async def stop_all(self) -> None:
        for worker in self.alive():
            if worker.terminated_at is None:
                worker.terminated_at = time.time()
                worker.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + EXIT_BOUND + 5
        while self.alive() and time.monotonic() < deadline:
            self.check_workers()
            await asyncio.sleep(0.05)
        self.check_workers()
        for worker in self.alive():
            worker.popen.kill()
            worker.popen.wait(10)

    async def collect(self) -> tuple[dict[str, dict[str, Any] | None], dict[str, dict[str, Any] | None]]:
        rows: dict[str, dict[str, Any] | None] = {}
        dead: dict[str, dict[str, Any] | None] = {}
        for job in self.planned:
            rows[job.job_id] = await stored_job(self.app, job.job_id)
            if rows[job.job_id] is None:
                dead[job.job_id] = await self.app.dead_letter.get(job.job_id)
        return rows, dead

    def write_faults(self) -> None:
        with open(self.config.directory / "faults.log", "w", encoding="utf-8") as handle:
            for fault in self.faults:
                handle.write(f"{fault.at:.6f} {fault.kind} {fault.pid or '-'}\n")

    # -- the whole run ---------------------------------------------------------

    async def run(self) -> ChaosReport:
        began = time.monotonic()
        await self.app.setup()
        try:
            await self.enqueue_plan()
            self.keep_serving()
            stop_sampling = asyncio.Event()
            sampler = asyncio.create_task(self.sample(stop_sampling))
            window_ends = time.monotonic() + self.config.seconds
            while time.monotonic() < window_ends:
                await asyncio.sleep(self.rng.uniform(0.4, 1.4))
                self.check_workers()
                await self.inject()
            settle_seconds = await self.settle()
            stop_sampling.set()
            await sampler
            await self.stop_all()
            rows, dead = await self.collect()
        finally:
            for worker in self.alive():
                worker.popen.kill()
                worker.popen.wait(10)
            await self.app.close()
        self.write_faults()
        logs = [w.log() for w in self.workers]
        explained_by = self.faults + stale_judgments(logs, self.faults)
        verdict = judge(self.planned, rows, dead, read_runs(self.runlog), explained_by)
        report = ChaosReport(
            config=self.config,
            verdict=verdict,
            faults=Counter(f.kind for f in self.faults),
            violations=self.violations + verdict.violations,
            samples=self.samples,
            failed_starts=self.failed_starts,
            sweep_recoveries=sweep_recoveries(logs, self.faults),
            settle_seconds=settle_seconds,
            worker_processes=len(self.workers),
            elapsed=time.monotonic() - began,
        )
        save_figures(report, self.config.directory / "figures.json")
        return report


async def run_chaos(config: ChaosConfig) -> ChaosReport:
    """Run one chaos session and return its report; the caller asserts on `report.violations`."""
    return await ChaosRun(config).run()
