"""The driver side of the benchmark: one command per call, one JSON line out.

Each system's driver (``drivers/<name>.py``) runs inside that system's own
virtualenv and subclasses `Driver` with a handful of adapters (schema set-up,
one enqueue, one bulk enqueue, the worker command line, the done count).
Everything that is measured the same way for every system lives here: the
fresh database, the clocks, the worker processes, the polling and the stop.

Needs only the standard library plus asyncpg (every bench venv has it);
the Redis runs import redis-py, which every Redis system's venv has. Every
loop here is bounded by a count and by a deadline, and talks only to
127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg

HERE = Path(__file__).resolve().parent
SERVER = os.environ.get("BENCH_PG_SERVER", "postgresql://postgres@127.0.0.1:5432")
ADMIN_URL = f"{SERVER}/postgres"
CHUNK = 5_000
LOG_DIR = Path(os.environ.get("BENCH_LOG_DIR", tempfile.gettempdir())) / "soniq-bench-logs"
# The Redis runs use their own database number on the local server, and delete only their own keys.
REDIS_URL = "redis://127.0.0.1:6379/" + os.environ.get("BENCH_REDIS_DB", "12")


def database_url(name: str) -> str:
    return f"{SERVER}/bench_{name}"


def check_loopback(url: str) -> None:
    if "@127.0.0.1" not in url and "@localhost" not in url and not url.startswith(("sqlite", "redis://127.0.0.1:")):
        raise SystemExit(f"refusing a non-loopback server: {url}")


async def recreate_database(name: str) -> str:
    """Drop and create `bench_<name>`, so no run sees another's rows or bloat."""
    url = database_url(name)
    check_loopback(url)
    conn = await asyncpg.connect(ADMIN_URL)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "bench_{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "bench_{name}"')
    finally:
        await conn.close()
    return url


def fresh_sqlite_url(name: str) -> tuple[str, Path]:
    folder = Path(tempfile.gettempdir()) / f"soniq-bench-sqlite-{name}"
    folder.mkdir(exist_ok=True)
    for leftover in folder.glob("bench.db*"):
        leftover.unlink()
    path = folder / "bench.db"
    return f"sqlite:///{path}", path


def wait_exit(process: subprocess.Popen[bytes], timeout: float) -> float | None:
    """Monotonic time at which `process` exited, or None after `timeout`.

    `Popen.wait(timeout)` polls with sleeps of up to 50 ms, which would
    quantise a 30 ms shutdown; a pidfd becomes readable the moment it exits.
    """
    fd = os.pidfd_open(process.pid)
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        exited_at = time.monotonic() if ready else None
    finally:
        os.close(fd)
    if exited_at is not None:
        process.wait()
    return exited_at


def rss_mb(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) in MiB of one process, from /proc."""
    current = peak = 0.0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                current = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    except OSError:
        pass
    return current, peak


class Driver:
    """What one system must provide; the measurements are the same for all."""

    name = "base"
    supports_sqlite = False
    supports_postgres = True
    supports_redis = False
    #: Args each job carries in the throughput runs (the latency run adds "t").
    job_args: dict[str, Any] = {"n": 1}

    # -- adapters every driver implements ------------------------------------

    async def setup(self, url: str) -> None:
        """Create the system's schema in the (fresh, empty) database at `url`."""
        raise NotImplementedError

    async def open(self, url: str) -> None:
        """Connect the producer used by the enqueue calls."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def enqueue_one(self, args: dict[str, Any]) -> None:
        raise NotImplementedError

    async def enqueue_bulk(self, args_list: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def worker_command(self, url: str, concurrency: int) -> tuple[list[str], dict[str, str]]:
        """argv and extra environment of one real worker process."""
        raise NotImplementedError

    async def done_count(self, conn: asyncpg.Connection, total: int) -> int:
        """Jobs finished so far (`total` were enqueued), read from the database."""
        raise NotImplementedError

    def sqlite_done_count(self, db: sqlite3.Connection, total: int) -> int:
        raise NotImplementedError

    # -- Redis (drivers with supports_redis) -------------------------------------

    async def redis_fresh(self) -> str:
        """Delete this system's keys in the bench's Redis database, set it up; the URL its workers get."""
        raise NotImplementedError

    async def redis_done_count(self, client: Any, total: int) -> int:
        """Jobs finished so far, read with a redis-py asyncio client on REDIS_URL."""
        raise NotImplementedError

    async def redis_cleanup(self) -> None:
        """Delete the keys this system created (after a run)."""

    # -- depth (drivers that can load finished rows) -----------------------------

    async def add_done_rows(self, conn: asyncpg.Connection, count: int) -> None:
        """Insert `count` finished rows whose expiry has passed (what pruning deletes)."""
        raise NotImplementedError

    async def pending_count(self, conn: asyncpg.Connection) -> int | None:
        """Rows not yet finished, if the system can count them cheaply at depth (else None)."""
        return None

    # -- shared machinery ----------------------------------------------------

    def spawn_worker(
        self, url: str, concurrency: int, extra_env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        argv, env = self.worker_command(url, concurrency)
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join([str(HERE), full_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        full_env.update(env)
        full_env.update(extra_env or {})
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        log = open(LOG_DIR / f"{self.name}-worker-{time.time_ns()}.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(
            argv, env=full_env, cwd=str(HERE), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        return process

    @staticmethod
    def stop_workers(workers: Sequence[subprocess.Popen[bytes]], timeout: float = 15.0) -> None:
        for process in workers:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in workers:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)

    async def fresh(self, sqlite: bool = False, redis: bool = False, done_rows: int = 0) -> str:
        if redis:
            return await self.redis_fresh()
        if done_rows:
            return await self.fresh_at_depth(done_rows)
        if sqlite:
            url, _ = fresh_sqlite_url(self.name)
        else:
            url = await recreate_database(self.name)
        await self.setup(url)
        return url

    def template_name(self) -> str:
        return f"bench_{self.name}_depth_template"

    async def fresh_at_depth(self, done_rows: int) -> str:
        """A fresh database holding `done_rows` finished rows, copied from a template.

        The template is built once per runner session (BENCH_RUN_ID, recorded
        as the template database's comment) and vacuumed and analysed, like a
        table autovacuum has caught up with; each repetition gets a file copy
        of it (seconds), not a fresh load of a million rows.
        """
        template = self.template_name()
        stamp = f"{os.environ.get('BENCH_RUN_ID', 'manual')}:{done_rows}"
        admin = await asyncpg.connect(ADMIN_URL)
        try:
            current = await admin.fetchval(
                "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1", template
            )
            if current != stamp:
                await admin.execute(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
                await admin.execute(f'CREATE DATABASE "{template}"')
                url = f"{SERVER}/{template}"
                await self.setup(url)
                conn = await asyncpg.connect(url)
                try:
                    await self.add_done_rows(conn, done_rows)
                    await conn.execute("VACUUM ANALYZE")
                finally:
                    await conn.close()
                await admin.execute(f"COMMENT ON DATABASE \"{template}\" IS '{stamp}'")
            await admin.execute(f'DROP DATABASE IF EXISTS "bench_{self.name}" WITH (FORCE)')
            await admin.execute(f'CREATE DATABASE "bench_{self.name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
        finally:
            await admin.close()
        return database_url(self.name)

    async def drop_template(self) -> None:
        admin = await asyncpg.connect(ADMIN_URL)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{self.template_name()}" WITH (FORCE)')
        finally:
            await admin.close()

    async def fill(self, url: str, count: int, extra: dict[str, Any] | None = None) -> None:
        await self.open(url)
        try:
            for start in range(0, count, CHUNK):
                size = min(CHUNK, count - start)
                await self.enqueue_bulk([{**self.job_args, **(extra or {})} for _ in range(size)])
        finally:
            await self.close()

    count_pending = False

    async def poll_until(
        self,
        url: str,
        total: int,
        target: int,
        deadline: float,
        workers: Sequence[subprocess.Popen[bytes]],
        on_sample: Callable[[int], None] | None = None,
    ) -> list[tuple[float, int]]:
        """Samples (monotonic time, done) until `target` are done or the deadline passes.

        The pause between reads is ten times the last read's cost (at least
        5 ms), so counting a large table takes at most ~10% of one core.
        """
        samples: list[tuple[float, int]] = []
        count, close = await self.open_counter(url, total)
        try:
            while time.monotonic() < deadline:
                began = time.monotonic()
                try:
                    done = await count()
                except sqlite3.OperationalError:
                    await asyncio.sleep(0.01)
                    continue
                ended = time.monotonic()
                samples.append(((began + ended) / 2, done))
                if on_sample is not None:
                    on_sample(done)
                if done >= target:
                    break
                if any(w.poll() is not None for w in workers):
                    raise RuntimeError(f"a {self.name} worker exited early (logs in {LOG_DIR})")
                await asyncio.sleep(max(0.005, 10 * (ended - began)))
        finally:
            await close()
        return samples

    async def open_counter(
        self, url: str, total: int
    ) -> tuple[Callable[[], Awaitable[int]], Callable[[], Awaitable[None]]]:
        """(read the done count, close) for the store at `url`."""
        if url.startswith("sqlite"):
            db = sqlite3.connect(url[len("sqlite:///") :], timeout=5)

            async def count_sqlite() -> int:
                return self.sqlite_done_count(db, total)

            async def close_sqlite() -> None:
                db.close()

            return count_sqlite, close_sqlite
        if url.startswith("redis"):
            import redis.asyncio as aioredis

            client = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)

            async def count_redis() -> int:
                return await self.redis_done_count(client, total)

            async def close_redis() -> None:
                await client.aclose()

            return count_redis, close_redis
        conn = await asyncpg.connect(url)
        # At depth the done count would read the old finished rows too: count what is left instead.
        use_pending = self.count_pending

        async def count_pg() -> int:
            if use_pending:
                pending = await self.pending_count(conn)
                if pending is not None:
                    return total - pending
            return await self.done_count(conn, total)

        async def close_pg() -> None:
            await conn.close()

        return count_pg, close_pg

    # -- the commands ----------------------------------------------------------

    async def cmd_enqueue_single(self, n: int) -> dict[str, Any]:
        url = await self.fresh()
        await self.open(url)
        try:
            for _ in range(20):
                await self.enqueue_one(dict(self.job_args))
            began = time.perf_counter()
            for _ in range(n):
                await self.enqueue_one(dict(self.job_args))
            seconds = time.perf_counter() - began
        finally:
            await self.close()
        return {"rate": n / seconds, "seconds": seconds, "n": n}

    async def cmd_enqueue_bulk(self, n: int) -> dict[str, Any]:
        url = await self.fresh()
        await self.open(url)
        try:
            await self.enqueue_bulk([dict(self.job_args) for _ in range(10)])
            batch = [dict(self.job_args) for _ in range(n)]
            began = time.perf_counter()
            await self.enqueue_bulk(batch)
            seconds = time.perf_counter() - began
        finally:
            await self.close()
        return {"rate": n / seconds, "seconds": seconds, "n": n}

    async def cmd_process(
        self,
        n: int,
        backlog: int,
        workers: int,
        concurrency: int,
        sqlite: bool,
        timeout: float,
        redis: bool = False,
        done_rows: int = 0,
        worker_env: dict[str, str] | None = None,
        rss_at: Sequence[int] = (),
    ) -> dict[str, Any]:
        """Throughput of `workers` real worker processes over the first `n` of `backlog` jobs.

        The rate is the slope between the first read that sees a finished job
        and the first that sees `n`: worker start-up (imports, connecting) is
        left out, as is the tail after `n`.

        `done_rows` finished rows sit in the table first (see fresh_at_depth);
        `worker_env` is added to each worker's environment; for each count in
        `rss_at` the workers' RSS is read when the done count first reaches it.
        """
        backlog = max(backlog, n)
        url = await self.fresh(sqlite=sqlite, redis=redis, done_rows=done_rows)
        self.count_pending = done_rows > 0
        old_rows_before = await self.old_rows(url) if done_rows else None
        await self.fill(url, backlog)
        spawned_at = time.monotonic()
        procs = [self.spawn_worker(url, concurrency, worker_env) for _ in range(workers)]
        rss_seen: dict[str, float] = {}
        pending_marks = sorted(rss_at)

        def observe(done: int) -> None:
            while pending_marks and done >= pending_marks[0]:
                mark = pending_marks.pop(0)
                rss_seen[str(mark)] = max(rss_mb(p.pid)[0] for p in procs)
                rss_seen[f"{mark}_done"] = done

        try:
            samples = await self.poll_until(url, backlog, n, spawned_at + timeout, procs, observe)
            memory = [rss_mb(p.pid) for p in procs]
        finally:
            self.stop_workers(procs)
            if redis:
                await self.redis_cleanup()
        started = [s for s in samples if s[1] > 0]
        if not started:
            return {"rate": 0.0, "timed_out": True, "done": 0, "n": n}
        first, last = started[0], started[-1]
        timed_out = last[1] < n
        extra: dict[str, Any] = {}
        if rss_at:
            extra["rss_at_mb"] = rss_seen
            base = rss_seen.get(str(min(rss_at)))
            if base:
                extra["rss_mark_mb"] = base
                if not timed_out:
                    extra["rss_growth"] = max(m[0] for m in memory) / base
        if done_rows:
            extra["done_rows"] = done_rows
            if old_rows_before is not None:
                left = await self.old_rows(url)
                extra["old_rows_pruned"] = None if left is None else old_rows_before - left
        if last[1] - first[1] >= max(1, n // 2) and last[0] > first[0]:
            rate = (last[1] - first[1]) / (last[0] - first[0])
        else:
            rate = last[1] / max(1e-6, last[0] - spawned_at)
        return {
            "rate": rate,
            "timed_out": timed_out,
            "done": last[1],
            "n": n,
            "backlog": backlog,
            "workers": workers,
            "concurrency": concurrency,
            "seconds_from_spawn": last[0] - spawned_at,
            "first_done_after": first[0] - spawned_at,
            "samples": len(samples),
            "rss_mb": max(m[0] for m in memory),
            "peak_rss_mb": max(m[1] for m in memory),
            **extra,
        }

    async def old_rows(self, url: str) -> int | None:
        """How many of the loaded finished rows are still there (None: not counted)."""
        return None

    async def _warm_worker(self, url: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """A worker that has finished one job and is now idle."""
        process = self.spawn_worker(url, 10, extra_env)
        await self.open(url)
        try:
            await self.enqueue_one(dict(self.job_args))
        finally:
            await self.close()
        samples = await self.poll_until(url, 1, 1, time.monotonic() + 60, [process])
        if not samples or samples[-1][1] < 1:
            self.stop_workers([process])
            raise RuntimeError(f"{self.name} worker did not finish a warm-up job within 60 s")
        return process

    async def cmd_latency(self, jobs: int, gap_ms: float) -> dict[str, Any]:
        """Enqueue call to handler start, one idle worker, jobs spaced `gap_ms` apart."""
        url = await self.fresh()
        record = Path(tempfile.gettempdir()) / f"soniq-bench-latency-{self.name}.txt"
        record.unlink(missing_ok=True)
        process = await self._warm_worker(url, {"BENCH_LATENCY_FILE": str(record)})
        try:
            await asyncio.sleep(0.5)
            await self.open(url)
            try:
                for _ in range(jobs):
                    began = time.monotonic()
                    await self.enqueue_one({**self.job_args, "t": time.time()})
                    await asyncio.sleep(max(0.0, gap_ms / 1000 - (time.monotonic() - began)))
            finally:
                await self.close()
            deadline = time.monotonic() + 30
            values: list[float] = []
            while time.monotonic() < deadline:
                lines = record.read_text().split() if record.exists() else []
                values = [float(v) * 1000 for v in lines]
                if len(values) >= jobs:
                    break
                await asyncio.sleep(0.05)
        finally:
            self.stop_workers([process])
        if not values:
            return {"p50_ms": None, "p95_ms": None, "received": 0, "jobs": jobs}
        ordered = sorted(values)
        return {
            "p50_ms": statistics.median(ordered),
            "p95_ms": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
            "max_ms": ordered[-1],
            "received": len(values),
            "jobs": jobs,
        }

    async def cmd_sigterm(self, runs: int) -> dict[str, Any]:
        """SIGTERM to process exit of an idle worker (that has done one job)."""
        values: list[float] = []
        memory: list[float] = []
        for _ in range(runs):
            url = await self.fresh()
            process = await self._warm_worker(url)
            try:
                await asyncio.sleep(1.0)
                memory.append(rss_mb(process.pid)[0])
                began = time.monotonic()
                process.send_signal(signal.SIGTERM)
                exited_at = wait_exit(process, 40)
                values.append(40_000.0 if exited_at is None else (exited_at - began) * 1000)
            finally:
                self.stop_workers([process], timeout=2)
        return {"ms": statistics.median(values), "all_ms": values, "idle_rss_mb": statistics.median(memory)}


async def _drop_template(driver: Driver) -> dict[str, Any]:
    await driver.drop_template()
    return {"dropped": driver.template_name()}


def main(driver: Driver, argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"{driver.name} driver")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("enqueue-single")
    p.add_argument("n", type=int)
    p = sub.add_parser("enqueue-bulk")
    p.add_argument("n", type=int)
    p = sub.add_parser("process")
    p.add_argument("n", type=int)
    p.add_argument("--backlog", type=int, default=0)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--sqlite", action="store_true")
    p.add_argument("--redis", action="store_true", help=f"run on Redis ({REDIS_URL})")
    p.add_argument("--done-rows", type=int, default=0, help="finished rows in the table first")
    p.add_argument("--worker-env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--rss-at", type=int, action="append", default=[], metavar="DONE")
    p.add_argument("--timeout", type=float, default=180.0)
    p = sub.add_parser("latency")
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--gap-ms", type=float, default=20.0)
    p = sub.add_parser("sigterm")
    p.add_argument("--runs", type=int, default=3)
    sub.add_parser("drop-template")
    args = parser.parse_args(argv)
    # Stopped by the runner: unwind, so the `finally` blocks stop the worker processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    if args.command == "enqueue-single":
        work = driver.cmd_enqueue_single(args.n)
    elif args.command == "enqueue-bulk":
        work = driver.cmd_enqueue_bulk(args.n)
    elif args.command == "drop-template":
        work = _drop_template(driver)
    elif args.command == "process":
        if args.sqlite and not driver.supports_sqlite:
            print(json.dumps({"skipped": "no SQLite backend"}))
            return
        if args.redis and not driver.supports_redis:
            print(json.dumps({"skipped": "no Redis backend"}))
            return
        if not args.sqlite and not args.redis and not driver.supports_postgres:
            print(json.dumps({"skipped": "no PostgreSQL backend"}))
            return
        worker_env = dict(item.split("=", 1) for item in args.worker_env)
        work = driver.cmd_process(
            args.n,
            args.backlog,
            args.workers,
            args.concurrency,
            args.sqlite,
            args.timeout,
            redis=args.redis,
            done_rows=args.done_rows,
            worker_env=worker_env,
            rss_at=args.rss_at,
        )
    elif args.command == "latency":
        work = driver.cmd_latency(args.jobs, args.gap_ms)
    else:
        work = driver.cmd_sigterm(args.runs)
    result = asyncio.run(work)
    sys.stdout.write(json.dumps(result) + "\n")
