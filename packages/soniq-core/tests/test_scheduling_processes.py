"""Periodic jobs with real processes: workers and a `soniq scheduler`, SIGKILLs and restarts.

On PostgreSQL, SQLite and Redis: every due time of an ``every=1`` schedule is
enqueued exactly once (one row per due time, `scheduled_at` = the due time),
with no gaps under ``catch_up="all"``, while processes are killed and
restarted; a schedule added from another process fires without a restart;
and when the leader is SIGKILLed another process takes the lease.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from soniq import Soniq
from soniq.params import GetLeaseParams, JobPageParams

T = TypeVar("T")

JOBS = textwrap.dedent(
    """
    import os
    from soniq import Soniq

    namespace = os.environ.get("SCHED_NAMESPACE")
    app = Soniq(os.environ["SCHED_URL"], backend_options={"namespace": namespace} if namespace else None)

    @app.periodic(every=1, catch_up="all", catch_up_limit=1000, name="sched.tick")
    async def tick() -> None:
        return None

    @app.job(name="sched.later")
    async def later() -> None:
        return None
    """
)

ENV = {
    "SONIQ_OBSERVERS": "",
    "SONIQ_HEARTBEAT_INTERVAL": "0.3",
    "SONIQ_HEARTBEAT_TIMEOUT": "1.5",
    "SONIQ_POLL_INTERVAL": "0.05",
    "SONIQ_SCHEDULER_POLL_INTERVAL": "0.2",
    "SONIQ_LEADER_LEASE_TTL": "1.5",
    "SONIQ_SHUTDOWN_TIMEOUT": "2",
}


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true, so this fails instead of skipping)")
    pytest.skip(reason)


def _redis_url() -> str:
    base = os.environ.get("SONIQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    host_port = base.split("://", 1)[1].split("/", 1)[0]
    host, _, port = host_port.partition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port or 6379)), timeout=1.0):
            pass
    except OSError:
        _unavailable(f"no Redis server at {host_port}; start it with: redis-server --daemonize yes --save ''")
    return f"redis://{host_port}/15"


@pytest.fixture(params=["postgres", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str | None]:
    """(url, namespace) of a store that several processes share."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'queue.db'}", None
    if request.param == "redis":
        return _redis_url(), f"sched_{uuid.uuid4().hex[:10]}"
    return request.getfixturevalue("postgres_url"), f"sched_{uuid.uuid4().hex[:10]}"


def wait_for(condition: Callable[[], T | None], *, timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class Fleet:
    """Worker and scheduler processes on one store, and in-process reads of it."""

    def __init__(self, url: str, namespace: str | None, directory: Path) -> None:
        self.url, self.namespace, self.directory = url, namespace, directory
        (directory / "sched_jobs.py").write_text(JOBS)
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}

    def app(self) -> Soniq:
        options = {"namespace": self.namespace} if self.namespace else None
        return Soniq(self.url, backend_options=options, observers="")

    def run(self, body: Callable[[Soniq], Any]) -> Any:
        async def main() -> Any:
            app = self.app()
            try:
                await app.setup()
                return await body(app)
            finally:
                await app.close()

        return asyncio.run(main())

    def start(self, *command: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
        env.update(ENV, SCHED_URL=self.url, PYTHONUNBUFFERED="1")
        if self.namespace:
            env["SCHED_NAMESPACE"] = self.namespace
        log = self.directory / f"proc-{len(self.processes)}.log"
        with open(log, "wb") as handle:
            popen = subprocess.Popen(
                [sys.executable, "-m", "soniq", *command],
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
            )
        self.processes.append(popen)
        self.logs[popen.pid] = log
        wait_for(lambda: "started" in log.read_text() or popen.poll() is not None, timeout=30, what="start")
        assert popen.poll() is None, log.read_text()[-3000:]
        return popen

    def worker(self) -> subprocess.Popen[bytes]:
        return self.start("worker", "--jobs-modules", "sched_jobs")

    def scheduler(self) -> subprocess.Popen[bytes]:
        return self.start("scheduler", "sched_jobs")

    def due_times(self, job_name: str) -> list[datetime]:
        async def body(app: Soniq) -> list[datetime]:
            backend = await app.connected_backend()
            page = await backend.job_page(JobPageParams(job_name=job_name, limit=100_000))
            return sorted(r.scheduled_at for r in page.rows)

        result: list[datetime] = self.run(body)
        return result

    def leader(self) -> str | None:
        async def body(app: Soniq) -> str | None:
            backend = await app.connected_backend()
            lease = await backend.get_lease(GetLeaseParams())
            return lease.holder if lease is not None else None

        result: str | None = self.run(body)
        return result

    def more_runs(self, job_name: str, than: int) -> list[datetime] | None:
        times = self.due_times(job_name)
        return times if len(times) > than else None

    def cleanup(self) -> None:
        for popen in self.processes:
            if popen.poll() is None:
                popen.kill()
                popen.wait(10)

        async def drop(app: Soniq) -> None:
            await app.backend.drop_schema()

        try:
            self.run(drop)
        except Exception:
            pass


@pytest.fixture
def fleet(store: tuple[str, str | None], tmp_path: Path) -> Iterator[Fleet]:
    url, namespace = store
    made = Fleet(url, namespace, tmp_path)
    try:
        yield made
    finally:
        made.cleanup()


def holder_pid(holder: str) -> int:
    """Worker ids are ``host-pid-hex``, `soniq scheduler` ones ``scheduler-host-pid-hex``."""
    match = re.search(r"-(\d+)-[0-9a-f]{8}$", holder)
    assert match, holder
    return int(match.group(1))


def assert_exactly_once_without_gaps(times: list[datetime]) -> None:
    """Every due time on the schedule's one-second grid was enqueued exactly once.

    A row that stale recovery hands back (its worker was SIGKILLed) gets a fresh `scheduled_at`, so
    its due time is no longer on the grid: such rows are counted, and each must stand for exactly one
    due time missing from the grid; any due time twice, or a slot left empty, fails.
    """
    assert times, "no due times"
    grid_phase = statistics.mode(round(t.timestamp() % 1, 3) % 1 for t in times)

    def on_grid(t: datetime) -> bool:
        off = abs(t.timestamp() % 1 - grid_phase)
        return min(off, 1 - off) < 0.001

    fired = [t for t in times if on_grid(t)]
    handed_back = len(times) - len(fired)
    assert len(fired) == len(set(fired)), "a due time was enqueued twice"
    steps = [b - a for a, b in itertools.pairwise(fired)]
    slots = [round(step.total_seconds()) for step in steps]
    off_by = [
        (a, s)
        for a, s, n in zip(fired, steps, slots, strict=False)
        if abs(s - timedelta(seconds=n)) > timedelta(milliseconds=5)
    ]
    assert not off_by, f"due times are not whole seconds apart: {off_by[:5]}"
    missing = sum(n - 1 for n in slots)
    # A handed-back row whose due time came after the last one still on the grid leaves no gap between
    # two grid times: it stands for the next due time after the grid's end (the k-th such row for the
    # k-th slot), which its fresh `scheduled_at` can only be later than.
    after_grid = sorted(t for t in times if not on_grid(t) and fired and t > fired[-1])
    for k, t in enumerate(after_grid, start=1):
        assert t >= fired[-1] + timedelta(seconds=k) - timedelta(milliseconds=5), (
            f"a row handed back after the grid's end is earlier than the due time it stands for: {t}"
        )
    missing += len(after_grid)
    assert missing == handed_back, (
        f"{missing} due times missing from the grid, {handed_back} rows handed back by stale recovery: {times}"
    )


def test_every_due_time_once_across_kills_restarts_and_a_leader_failover(fleet: Fleet) -> None:
    fleet.run(lambda app: asyncio.sleep(0))  # the schema, before any process races to create it
    workers = [fleet.worker(), fleet.worker()]
    scheduler = fleet.scheduler()
    wait_for(lambda: fleet.more_runs("sched.tick", 3), timeout=30, what="the first due times")

    # A worker dies without a word, and comes back.
    workers[0].send_signal(signal.SIGKILL)
    workers[0].wait(10)
    seen = len(fleet.due_times("sched.tick"))
    wait_for(lambda: fleet.more_runs("sched.tick", seen + 2), timeout=30, what="firing after a SIGKILL")
    workers[0] = fleet.worker()

    # The separate scheduler dies too; the workers' own loops carry on; it comes back.
    scheduler.send_signal(signal.SIGKILL)
    scheduler.wait(10)
    seen = len(fleet.due_times("sched.tick"))
    wait_for(lambda: fleet.more_runs("sched.tick", seen + 2), timeout=30, what="firing without the scheduler")
    scheduler = fleet.scheduler()

    # A schedule added at run time from this process fires on the running fleet, no restart.
    async def add(app: Soniq) -> str:
        return await app.scheduler.add("sched.later", every=1, catch_up="all", catch_up_limit=1000)

    fleet.run(add)
    wait_for(lambda: fleet.more_runs("sched.later", 2), timeout=30, what="the schedule added at run time")

    # The leader is SIGKILLed: its lease lapses and another live process takes it.
    first = wait_for(fleet.leader, timeout=30, what="a leader")
    killed = holder_pid(first)
    victim = next(p for p in fleet.processes if p.pid == killed)
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    second = wait_for(lambda: (h := fleet.leader()) and h != first and h, timeout=30, what="a new leader")
    live = {p.pid for p in fleet.processes if p.poll() is None}
    assert holder_pid(second) in live
    seen = len(fleet.due_times("sched.tick"))
    wait_for(lambda: fleet.more_runs("sched.tick", seen + 2), timeout=30, what="firing after the failover")

    # Everything still running stops cleanly on SIGTERM, and the lease is released on the way out.
    for popen in fleet.processes:
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
    for popen in fleet.processes:
        if popen.pid != killed and popen.returncode != -signal.SIGKILL:
            code = popen.wait(30)
            assert code in (0, -signal.SIGKILL), fleet.logs[popen.pid].read_text()[-3000:]
    assert fleet.leader() is None

    assert_exactly_once_without_gaps(fleet.due_times("sched.tick"))
    assert_exactly_once_without_gaps(fleet.due_times("sched.later"))
    logs = "".join(path.read_text() for path in fleet.logs.values())
    assert "schedule 'sched.tick' fired" in logs
    assert "is now the leader" in logs
