"""The many-workers scenario, driver side: one point of the scaling curve in a fresh process.

``python _scaling.py SYSTEM --workers K [--n N] [--backlog B] [--queues Q] [--concurrency C] [--pgbouncer URL]``

SYSTEM is ``ours`` or ``pgqueuer`` (run inside that system's venv). The database is
fresh; B jobs (at least N) are queued over Q queues (pgqueuer: one entrypoint); K real
worker processes start, and the driver samples, every few milliseconds, the finished
count and the server-side connections to the bench database. With ``--pgbouncer`` the
workers reach the database through that PgBouncer (the producer and the sampler stay
direct). After N jobs the workers go idle and 40 jobs, 25 ms apart, measure pickup
latency with K idle workers competing. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg

from _harness import CHUNK, Driver

LATENCY_JOBS = 40
LATENCY_GAP = 0.025


def _driver(system: str) -> Driver:
    if system == "ours":
        from ours_driver import OursDriver

        return OursDriver()
    if system == "pgqueuer":
        from pgqueuer_driver import PgqueuerDriver

        return PgqueuerDriver()
    raise SystemExit(f"unknown system {system!r} (ours or pgqueuer)")


def _through(pgbouncer: str, url: str) -> str:
    """`url`'s database at the PgBouncer address."""
    bouncer, parts = urlsplit(pgbouncer), urlsplit(url)
    return urlunsplit((parts.scheme, bouncer.netloc, parts.path, parts.query, ""))


async def _fill(driver: Driver, url: str, count: int, queues: int) -> None:
    await driver.open(url)
    try:
        app = getattr(driver, "app", None)
        for start in range(0, count, CHUNK):
            size = min(CHUNK, count - start)
            batch = [dict(driver.job_args) for _ in range(size)]
            if app is not None and queues > 1:  # ours: one insert per queue share of the chunk
                for q in range(queues):
                    share = batch[q::queues]
                    if share:
                        await app.enqueue_many(driver.noop, share, queue=f"q{q:02d}")  # type: ignore[attr-defined]
            else:
                await driver.enqueue_bulk(batch)
    finally:
        await driver.close()


async def _connections(conn: asyncpg.Connection, database: str) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", database))


async def point(args: argparse.Namespace) -> dict[str, Any]:
    driver = _driver(args.system)
    backlog = max(args.backlog, args.n)
    url = await driver.fresh()
    database = urlsplit(url).path.lstrip("/")
    await _fill(driver, url, backlog, args.queues)
    worker_url = url
    if args.pgbouncer:
        # Through the pooler; wake-ups from LISTEN on a direct connection (ours' listen_url).
        worker_url = _through(args.pgbouncer, url)
        if args.system == "ours":
            worker_url += "?listen_url=" + quote(url, safe="")
    record = Path(tempfile.gettempdir()) / f"soniq-bench-scaling-{args.system}.txt"
    record.unlink(missing_ok=True)
    spawned = time.monotonic()
    workers = [
        driver.spawn_worker(worker_url, args.concurrency, {"BENCH_LATENCY_FILE": str(record)})
        for _ in range(args.workers)
    ]
    samples: list[tuple[float, int]] = []
    peak_connections = 0
    latencies: list[float] = []
    sampler = await asyncpg.connect(url)
    try:
        deadline = spawned + args.timeout
        while time.monotonic() < deadline:
            began = time.monotonic()
            done = await driver.done_count(sampler, backlog)
            peak_connections = max(peak_connections, await _connections(sampler, database))
            ended = time.monotonic()
            samples.append(((began + ended) / 2, done))
            if done >= args.n:
                break
            if any(w.poll() is not None for w in workers):
                raise RuntimeError(f"a {driver.name} worker exited early (see its log)")
            await asyncio.sleep(max(0.005, 10 * (ended - began)))
        if backlog == args.n and samples and samples[-1][1] >= args.n:
            latencies = await _pickup_latencies(driver, url, record)
        idle_connections = await _connections(sampler, database)
    finally:
        await sampler.close()
        driver.stop_workers(workers)
    started = [s for s in samples if s[1] > 0]
    rate = 0.0
    if len(started) >= 2 and started[-1][0] > started[0][0]:
        rate = (started[-1][1] - started[0][1]) / (started[-1][0] - started[0][0])
    ordered = sorted(latencies)
    return {
        "system": args.system + ("+pgbouncer" if args.pgbouncer else ""),
        "workers": args.workers,
        "concurrency": args.concurrency,
        "n": args.n,
        "backlog": backlog,
        "queues": args.queues,
        "rate": rate,
        "done": samples[-1][1] if samples else 0,
        "timed_out": not samples or samples[-1][1] < args.n,
        "peak_server_connections": peak_connections,
        "idle_server_connections": idle_connections,
        "pickup_p50_ms": statistics.median(ordered) * 1000 if ordered else None,
        "pickup_p95_ms": ordered[round(0.95 * (len(ordered) - 1))] * 1000 if ordered else None,
        "pickups": len(ordered),
    }


async def _pickup_latencies(driver: Driver, url: str, record: Path) -> list[float]:
    await asyncio.sleep(0.5)  # every worker is idle and waiting
    await driver.open(url)
    try:
        for _ in range(LATENCY_JOBS):
            began = time.monotonic()
            await driver.enqueue_one({**driver.job_args, "t": time.time()})
            await asyncio.sleep(max(0.0, LATENCY_GAP - (time.monotonic() - began)))
    finally:
        await driver.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        values = [float(v) for v in record.read_text().split()] if record.exists() else []
        if len(values) >= LATENCY_JOBS:
            return values
        await asyncio.sleep(0.05)
    return [float(v) for v in record.read_text().split()] if record.exists() else []


def main() -> None:
    parser = argparse.ArgumentParser(prog="_scaling.py")
    parser.add_argument("system")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--backlog", type=int, default=0)
    parser.add_argument("--queues", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--pgbouncer", default="")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    sys.stdout.write(json.dumps(asyncio.run(point(args))) + "\n")


if __name__ == "__main__":
    main()
