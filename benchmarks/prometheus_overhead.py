"""The Prometheus sink's cost on processing: jobs/s with and without it, interleaved.

    .venv/bin/python benchmarks/prometheus_overhead.py [--url URL] [--jobs 5000] [--runs 5]

Each repetition enqueues N no-op async jobs in a fresh schema (or file), then drains
them with one in-process worker at concurrency 10, once without observers and once
with a `PrometheusMetricsSink`, the order alternating between repetitions so that
load drift hits both sides alike. The verdict is the median of the paired ratios of
jobs/s; the worker process's CPU time per job is printed beside it, since on a shared
machine wall-clock rates swing with the neighbours while CPU time moves much less.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import tempfile
import time
import uuid
from typing import Any

from prometheus_client import CollectorRegistry

from soniq import Soniq
from soniq_prometheus import PrometheusMetricsSink

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
SETTINGS: dict[str, Any] = {"observers": "", "poll_interval": 0.05, "concurrency": 10}


def postgres_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


async def one_run(url: str, jobs: int, with_sink: bool) -> tuple[float, float]:
    """(jobs/s, CPU microseconds of this process per job) for one drain."""
    sink = PrometheusMetricsSink(registry=CollectorRegistry())
    options: dict[str, Any] = {}
    if url.startswith("postgres"):
        options = {"namespace": f"bench_prom_{uuid.uuid4().hex[:8]}"}
    elif url.startswith("sqlite"):
        url = f"sqlite:///{tempfile.mkdtemp()}/bench.db"
    app = Soniq(url, backend_options=options or None, extra_observers=[sink] if with_sink else [], **SETTINGS)

    @app.job(name="noop")
    async def noop(n: int) -> None:
        return None

    await app.setup()
    await app.enqueue_many("noop", [{"n": n} for n in range(jobs)])
    started, cpu_started = time.perf_counter(), time.process_time()
    await app.run_worker(run_once=True, install_signal_handlers=False)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    done = (await app.get_queue_stats())["done"]
    assert done == jobs, f"{done} of {jobs} done"
    if with_sink:
        # The sink really counted every run: the measurement is not of a no-op.
        assert sink.jobs.count("default", "noop", "done") == jobs
    if options:
        await app.backend.drop_schema()
    await app.close()
    return jobs / elapsed, cpu / jobs * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_url = os.environ.get("SONIQ_BENCH_URL") or (POSTGRES_URL if postgres_reachable() else "sqlite://")
    parser.add_argument("--url", default=default_url)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    without: list[float] = []
    with_sink: list[float] = []
    ratios: list[float] = []
    cpu_without: list[float] = []
    cpu_with: list[float] = []
    await one_run(args.url, min(args.jobs, 500), False)  # warm-up: imports, connections, caches
    for rep in range(args.runs):
        order = (False, True) if rep % 2 == 0 else (True, False)
        runs = {flag: await one_run(args.url, args.jobs, flag) for flag in order}
        (rate_without, us_without), (rate_with, us_with) = runs[False], runs[True]
        without.append(rate_without)
        with_sink.append(rate_with)
        ratios.append(rate_with / rate_without)
        cpu_without.append(us_without)
        cpu_with.append(us_with)
        print(
            f"rep {rep + 1}: without {rate_without:,.0f} jobs/s ({us_without:.0f} us CPU/job), "
            f"with sink {rate_with:,.0f} jobs/s ({us_with:.0f} us CPU/job)"
        )
    overhead = 1 - statistics.median(ratios)
    backend = args.url.split(":", 1)[0]
    print(
        f"{backend}, N={args.jobs}, {args.runs} interleaved runs: without {statistics.median(without):,.0f} jobs/s, "
        f"with PrometheusMetricsSink {statistics.median(with_sink):,.0f} jobs/s, "
        f"median paired overhead {overhead:+.1%} ({'PASS' if overhead < 0.05 else 'FAIL'}: target < 5%); "
        f"CPU per job {statistics.median(cpu_without):.0f} us without, {statistics.median(cpu_with):.0f} us with"
    )


if __name__ == "__main__":
    asyncio.run(main())
