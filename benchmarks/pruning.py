"""Claim throughput while the leader prunes a large table of finished jobs (PostgreSQL).

    .venv/bin/python benchmarks/pruning.py [--rows 1000000] [--backlog 20000] [--runs 2] [--quick]

In a fresh schema, `--rows` finished (`done`) rows whose `expires_at` has
passed are inserted in one statement. Then, alternating over `--runs`
repetitions, a backlog of `--backlog` no-op jobs is enqueued and drained by
one in-process worker (concurrency 10), once with no pruning and once while
a separate ``soniq scheduler`` process holds the leader lease and prunes
(`prune_batch_size` 1000, `prune_pause` 0.05 s, one pass right after
another). The table is topped up to `--rows` expired rows before each
pruning repetition so every one starts from the same size. Reported: jobs/s
of each drain, rows pruned during the drains, and the median ratio
with/without: the number the docs quote.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from soniq import Soniq

POSTGRES_URL = os.environ.get("SONIQ_BENCH_URL", "postgresql://postgres@127.0.0.1:5432/test")
SETTINGS: dict[str, Any] = {"observers": "", "poll_interval": 0.05, "concurrency": 10, "job_timeout": 60}
LEADER_APP = textwrap.dedent(
    """
    import os
    from soniq import Soniq

    app = Soniq(os.environ["BENCH_URL"], backend_options={"namespace": os.environ["BENCH_SCHEMA"]})
    """
)


async def top_up(url: str, schema: str, rows: int) -> int:
    """Insert expired finished rows until the table holds `rows` of them; returns how many were added."""
    conn = await asyncpg.connect(url)
    try:
        have = await conn.fetchval(f"SELECT count(*) FROM {schema}.soniq_jobs WHERE status = 'done'")
        missing = max(0, rows - have)
        if missing:
            await conn.execute(
                f"""
                INSERT INTO {schema}.soniq_jobs
                    (id, job_name, args, status, attempts, max_attempts, queue, priority, scheduled_at,
                     created_at, updated_at, result, expires_at)
                SELECT 'old-' || md5(random()::text || g::text), 'bench.old', '{{}}', 'done', 1, 1, 'default',
                       100, now() - interval '2 days', now() - interval '2 days', now() - interval '2 days',
                       'null', now() - interval '1 day'
                FROM generate_series(1, $1) AS g
                """,
                missing,
            )
            await conn.execute(f"ANALYZE {schema}.soniq_jobs")
        return int(missing)
    finally:
        await conn.close()


async def expired_count(url: str, schema: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval(f"SELECT count(*) FROM {schema}.soniq_jobs WHERE job_name = 'bench.old'"))
    finally:
        await conn.close()


async def drain(url: str, schema: str, backlog: int) -> float:
    """Jobs/s of one in-process worker draining `backlog` fresh no-op jobs."""
    app = Soniq(url, backend_options={"namespace": schema}, **SETTINGS)

    @app.job(name="bench.noop")
    async def noop(n: int) -> None:
        return None

    await app.enqueue_many("bench.noop", [{"n": n} for n in range(backlog)])
    started = time.perf_counter()
    summary = await app.run_worker(run_once=True, install_signal_handlers=False)
    elapsed = time.perf_counter() - started
    await app.close()
    assert summary.processed >= backlog, f"{summary.processed} of {backlog} processed"
    return backlog / elapsed


def start_leader(url: str, schema: str, workdir: Path) -> subprocess.Popen[bytes]:
    (workdir / "bench_leader_app.py").write_text(LEADER_APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env.update(
        BENCH_URL=url,
        BENCH_SCHEMA=schema,
        SONIQ_OBSERVERS="",
        SONIQ_PRUNE_INTERVAL="0.1",
        SONIQ_PRUNE_BATCH_SIZE="1000",
        SONIQ_PRUNE_PAUSE="0.05",
        SONIQ_LEADER_LEASE_TTL="6",
        PYTHONUNBUFFERED="1",
    )
    log = open(workdir / "leader.log", "wb")  # noqa: SIM115 - the child owns it
    return subprocess.Popen(
        [sys.executable, "-m", "soniq", "scheduler", "bench_leader_app"],
        env=env,
        cwd=workdir,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


async def wait_pruning(url: str, schema: str, before: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while await expired_count(url, schema) >= before:
        if time.monotonic() > deadline:
            raise AssertionError("the leader did not start pruning")
        await asyncio.sleep(0.1)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=POSTGRES_URL)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="50,000 rows, a backlog of 3,000, one run")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.backlog, args.runs = 50_000, 3_000, 1
    schema = f"bench_prune_{uuid.uuid4().hex[:8]}"
    setup = Soniq(args.url, backend_options={"namespace": schema}, observers="")
    await setup.setup()
    workdir = Path(tempfile.mkdtemp(prefix="soniq-prune-bench-"))
    without: list[float] = []
    with_pruning: list[float] = []
    pruned: list[int] = []
    try:
        started = time.perf_counter()
        await top_up(args.url, schema, args.rows)
        print(f"{args.rows:,} expired finished rows inserted in {time.perf_counter() - started:.1f}s")
        for run in range(args.runs):
            await top_up(args.url, schema, args.rows)
            without.append(await drain(args.url, schema, args.backlog))
            await top_up(args.url, schema, args.rows)
            before = await expired_count(args.url, schema)
            leader = start_leader(args.url, schema, workdir)
            try:
                await wait_pruning(args.url, schema, before)
                at_start = await expired_count(args.url, schema)
                with_pruning.append(await drain(args.url, schema, args.backlog))
                pruned.append(at_start - await expired_count(args.url, schema))
            finally:
                leader.terminate()
                leader.wait(30)
            print(
                f"run {run + 1}: without pruning {without[-1]:,.0f} jobs/s; while pruning {with_pruning[-1]:,.0f} "
                f"jobs/s, {pruned[-1]:,} rows pruned during that drain"
            )
        ratios = [w / o for w, o in zip(with_pruning, without, strict=True)]
        print(
            f"median without {statistics.median(without):,.0f} jobs/s, while pruning "
            f"{statistics.median(with_pruning):,.0f} jobs/s: ratio {statistics.median(ratios):.2f}x "
            f"({args.rows:,} rows, backlog {args.backlog:,}, {args.runs} runs)"
        )
    finally:
        await setup.backend.drop_schema()
        await setup.close()


if __name__ == "__main__":
    asyncio.run(main())
