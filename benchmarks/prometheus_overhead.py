"""The Prometheus sink's cost on processing: CPU per job and jobs/s with and without it, interleaved.

    .venv/bin/python benchmarks/prometheus_overhead.py [--url URL] [--jobs 3000] [--pairs 15] [--inside]

Each repetition enqueues N no-op async jobs in a fresh schema (or file), then drains
them with one in-process worker at concurrency 10, once without observers and once
with a `PrometheusMetricsSink`, the order alternating between pairs so that load drift
hits both sides alike. Two verdicts come from the paired ratios' medians: the worker
process's CPU time per job (`time.process_time`, which counts every thread of the
process, so also SQLite's), the one to trust on a shared machine, where wall-clock rates
swing with the neighbours' load; and jobs/s, the one to trust on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import socket
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry

from soniq import HandlerKind, JobOutcome, Soniq
from soniq.bus import ObservationBus
from soniq.observers import job_end_event, job_start_event
from soniq.records import JobRecord, JobStatus
from soniq_prometheus import PrometheusMetricsSink

# One line per run about no-op jobs without a deadline is not what this measures.
logging.getLogger("soniq.worker").setLevel(logging.ERROR)

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
SETTINGS: dict[str, Any] = {"observers": "", "poll_interval": 0.05, "concurrency": 10}


def postgres_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


class InsideTimer:
    """With ``--inside``: the CPU time the worker spends in its two job-event steps (announcing a start,
    reporting an end: the `wants_job_events` check, the event, the bus and every hook), summed per drain.
    The wrapper costs the same on both sides, so the difference between them is the sink's direct cost."""

    def __init__(self) -> None:
        self.ns = 0

    def install(self) -> None:
        from soniq.worker._dispatch import Dispatcher

        for name in ("_announce", "_job_end"):
            original = getattr(Dispatcher, name)

            def timed(*args: Any, _original: Any = original) -> None:
                started = time.thread_time_ns()
                _original(*args)
                self.ns += time.thread_time_ns() - started

            setattr(Dispatcher, name, timed)


INSIDE = InsideTimer()


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
    INSIDE.ns = 0
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


def event_path_us(loops: int = 50_000, repeats: int = 7) -> tuple[float, float]:
    """CPU microseconds per job of what the worker does for job events, (no listener, the sink):
    the `wants_job_events` checks, building both events and the sink's two hooks, timed in a loop."""
    now = datetime.now(UTC)
    job = JobRecord(
        id="j",
        job_name="noop",
        args={},
        status=JobStatus.PROCESSING,
        attempts=0,
        max_attempts=3,
        queue="default",
        priority=0,
        scheduled_at=now,
        last_error=None,
        worker_id="w",
        result=None,
        created_at=now,
        updated_at=now,
    )

    def one(bus: ObservationBus) -> float:
        started = time.process_time()
        for _ in range(loops):
            if bus.wants_job_events:
                bus.job_start(job_start_event("w", job, HandlerKind.ASYNC, job.attempts + 1))
            if bus.wants_job_events:
                bus.job_end(job_end_event("w", job, HandlerKind.ASYNC, 1, JobOutcome.DONE, 0.001, None, None, None))
        return (time.process_time() - started) / loops * 1e6

    quiet = [one(ObservationBus([])) for _ in range(repeats)]
    sink = [one(ObservationBus([PrometheusMetricsSink(registry=CollectorRegistry())])) for _ in range(repeats)]
    return statistics.median(quiet), statistics.median(sink)


def paired(label: str, without: list[float], with_sink: list[float], *, higher_is_better: bool) -> float:
    """The median paired overhead of the sink, as a fraction (positive: the sink costs)."""
    ratios = [w / wo for wo, w in zip(without, with_sink, strict=True)]
    overhead = (1 - statistics.median(ratios)) if higher_is_better else (statistics.median(ratios) - 1)
    low, high = sorted(ratios)[len(ratios) // 4], sorted(ratios)[(3 * len(ratios)) // 4]
    print(
        f"  {label}: median without {statistics.median(without):,.1f}, with {statistics.median(with_sink):,.1f}; "
        f"median paired overhead {overhead:+.1%} (ratios' interquartile range {low:.3f}-{high:.3f}) "
        f"{'PASS' if overhead < 0.05 else 'FAIL'}: target < 5%"
    )
    return overhead


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_url = os.environ.get("SONIQ_BENCH_URL") or (POSTGRES_URL if postgres_reachable() else "sqlite://")
    parser.add_argument("--url", default=default_url)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--inside", action="store_true", help="also time the worker's job-event steps (InsideTimer)")
    args = parser.parse_args()
    inside: dict[bool, list[float]] = {False: [], True: []}
    if args.inside:
        INSIDE.install()
    rates: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    await one_run(args.url, min(args.jobs, 500), False)  # warm-up: imports, connections, caches
    await one_run(args.url, min(args.jobs, 500), True)
    for rep in range(args.pairs):
        for flag in (False, True) if rep % 2 == 0 else (True, False):
            gc.collect()  # no run inherits the previous one's garbage
            rate, us = await one_run(args.url, args.jobs, flag)
            inside[flag].append(INSIDE.ns / args.jobs / 1000)
            rates[flag].append(rate)
            cpu[flag].append(us)
        print(
            f"pair {rep + 1}: without {rates[False][-1]:,.0f} jobs/s ({cpu[False][-1]:.1f} us CPU/job), "
            f"with sink {rates[True][-1]:,.0f} jobs/s ({cpu[True][-1]:.1f} us CPU/job)"
        )
    backend = args.url.split(":", 1)[0]
    print(f"{backend}, N={args.jobs}, {args.pairs} interleaved pairs (sink off / on):")
    paired("CPU us per job", cpu[False], cpu[True], higher_is_better=False)
    paired("jobs/s", rates[False], rates[True], higher_is_better=True)
    if args.inside:
        extra = statistics.median(w - wo for wo, w in zip(inside[False], inside[True], strict=True))
        print(
            f"  inside the worker, job-event steps: median {statistics.median(inside[False]):.2f} us per job without, "
            f"{statistics.median(inside[True]):.2f} with; the sink's direct cost {extra:.2f} us per job, "
            f"{extra / statistics.median(cpu[False]):.1%} of a job's CPU without it"
        )
    quiet, sink = event_path_us()
    print(
        f"  job-event path alone (loop of 50,000): {quiet:.2f} us per job with no listener, {sink:.2f} us with the "
        f"sink, {(sink - quiet) / statistics.median(cpu[False]):.1%} of a job's CPU without it"
    )


if __name__ == "__main__":
    asyncio.run(main())
