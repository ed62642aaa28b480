"""The many-workers scenario: how processing scales with 1, 2, 4, 8 and 16 worker processes.

``python3 benchmarks/scaling.py [--workers 1,2,4,8,16] [--n 3000] [--systems ours,ours+pgbouncer,pgqueuer]``

Each point is `drivers/_scaling.py` in a fresh process and a fresh database
(throughput, peak and idle server connections, pickup latency with K idle
workers). ``ours+pgbouncer`` sends the workers through PgBouncer in
transaction mode (``bash scripts/servers start pgbouncer``, 127.0.0.1:6432)
with wake-ups on a direct ``listen_url``. Direct ``ours`` runs stop at the
worker count whose connection budget (concurrency + 2 pool connections and
one listener per worker) would not fit the server's free connections: on a
shared server the rest would only measure refused connections. A last run
queues 100,000 jobs over 50 queues. Results go to
``results/scaling-<time>.json`` (``--json PATH`` for a copy) and a table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from run import DRIVERS, RESULTS, ensure_env, venv_python

PGBOUNCER = "postgresql://postgres@127.0.0.1:6432/postgres"
DIRECT = "postgresql://postgres@127.0.0.1:5432"


def free_connections() -> int:
    """max_connections less the reserved ones less those in use now, on the bench server (via psql)."""
    query = (
        "SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int"
        " - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
    )
    out = subprocess.run(["psql", f"{DIRECT}/postgres", "-Atc", query], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def call(system: str, workers: int, args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    env_name = "pgqueuer" if system == "pgqueuer" else "ours"
    argv = [str(venv_python(env_name)), "_scaling.py", system.split("+")[0], "--workers", str(workers)]
    argv += ["--n", str(extra.get("n", args.n)), "--concurrency", str(args.concurrency)]
    argv += ["--backlog", str(extra.get("backlog", 0)), "--queues", str(extra.get("queues", 1))]
    if system.endswith("+pgbouncer"):
        argv += ["--pgbouncer", PGBOUNCER]
    print(f"[run] {system} workers={workers} {extra or ''}", flush=True)
    done = subprocess.run(argv, cwd=DRIVERS, capture_output=True, text=True, timeout=400)
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return {"system": system, "workers": workers, "error": done.stderr.strip().splitlines()[-1:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def render(results: list[dict[str, Any]]) -> str:
    lines = [
        "| system | workers | jobs/s | peak server conns | idle server conns | pickup p50 ms | pickup p95 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['system']} | {r['workers']} | error: {r['error']} | | | | |")
            continue
        p50 = "-" if r.get("pickup_p50_ms") is None else f"{r['pickup_p50_ms']:.1f}"
        p95 = "-" if r.get("pickup_p95_ms") is None else f"{r['pickup_p95_ms']:.1f}"
        label = r["system"] + (f" ({r['backlog']:,} over {r['queues']} queues)" if r["backlog"] > r["n"] else "")
        star = "*" if r.get("timed_out") else ""
        lines.append(
            f"| {label} | {r['workers']} | {r['rate']:.0f}{star} | {r['peak_server_connections']} | "
            f"{r['idle_server_connections']} | {p50} | {p95} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scaling.py")
    parser.add_argument("--workers", default="1,2,4,8,16")
    parser.add_argument("--systems", default="ours,ours+pgbouncer,pgqueuer")
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--no-backlog", action="store_true", help="skip the 100,000-over-50-queues run")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.workers.split(",")]
    systems = args.systems.split(",")
    for name in {"pgqueuer" if s == "pgqueuer" else "ours" for s in systems}:
        ensure_env(name, reinstall=False)
    budget = args.concurrency + 3  # pool (concurrency + 2) and one LISTEN connection per worker process
    results: list[dict[str, Any]] = []
    for workers in counts:
        for system in systems:
            if system == "ours":
                free = free_connections()
                if workers * budget > free - 5:
                    print(f"[skip] ours workers={workers}: {workers} x {budget} connections > {free} free", flush=True)
                    error = f"budget {workers * budget} > {free} free"
                    results.append({"system": system, "workers": workers, "error": error})
                    continue
            results.append(call(system, workers, args))
    if not args.no_backlog:
        system = "ours+pgbouncer" if "ours+pgbouncer" in systems else systems[0]
        results.append(call(system, 4, args, n=5000, backlog=100_000, queues=50))
    table = render(results)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    payload = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": results, "table": table}
    out = RESULTS / f"scaling-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(payload, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(payload, indent=2))
    print(f"[done] {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
