"""Time every dashboard page against a PostgreSQL schema holding 1,000,000 `soniq_jobs` rows.

    .venv/bin/python benchmarks/dashboard_pages.py [--rows 1000000] [--runs 15] [--url postgresql://...]

The rows are made in the server with one `generate_series` insert (70% done,
20% queued, 9% cancelled, 1% processing, 20 job names, 4 queues, created over
the last ~28 hours), plus 1,000 dead letters, then `VACUUM ANALYZE` of both
tables, as autovacuum would have done on a real table (without it no scan is
index-only and the planner has no statistics). The dashboard is served by
uvicorn on a real socket in this process and each page is fetched over HTTP;
the figure is the median of `--runs` fetches after two warm-ups. The overview
answers from a background snapshot, so two more rows time what that costs:
the first request after start (it waits for the first snapshot) and one
snapshot refresh (the overview's reads, called directly). The schema is
dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import uvicorn

from soniq import Soniq
from soniq.params import JobCursor
from soniq_dashboard import create_dashboard_app
from soniq_dashboard.reads import DashboardReads, encode_cursor

BUDGET_MS = 200.0

FILL = """
INSERT INTO {s}.soniq_jobs
    (id, job_name, args, status, attempts, max_attempts, queue, priority, scheduled_at,
     last_error, worker_id, result, created_at, updated_at, started_at)
SELECT 'j' || lpad(g::text, 9, '0'),
       'bench.job_' || (g % 20),
       json_build_object('n', g),
       CASE WHEN g % 100 < 70 THEN 'done' WHEN g % 100 < 90 THEN 'queued'
            WHEN g % 100 < 99 THEN 'cancelled' ELSE 'processing' END,
       CASE WHEN g % 13 = 0 THEN 1 ELSE 0 END,
       4,
       (ARRAY['default', 'emails', 'thumbnails', 'reports'])[1 + g % 4],
       100,
       t.at,
       CASE WHEN g % 13 = 0 THEN 'RuntimeError: flaky upstream' END,
       CASE WHEN g % 100 = 99 THEN 'bench-worker' END,
       CASE WHEN g % 100 < 70 THEN json_build_object('ok', true) END,
       t.at, t.at + interval '1 second',
       CASE WHEN g % 100 < 70 OR g % 100 = 99 THEN t.at END
FROM generate_series(1, $1::int) AS g,
     LATERAL (SELECT now() - ($1::int - g) * interval '100 milliseconds' AS at) AS t
"""

FILL_DEAD = """
INSERT INTO {s}.soniq_dead_letter_jobs
    (id, job_name, args, queue, attempts, max_attempts, priority, last_error, dead_letter_reason,
     moved_to_dead_letter_at, resurrection_count)
SELECT 'd' || g, 'bench.job_' || (g % 20), '{{}}', 'default', 4, 4, 100, 'ValueError: bad input',
       'max_attempts', now() - g * interval '1 minute', 0
FROM generate_series(1, 1000) AS g
"""


def serve(app: object) -> tuple[uvicorn.Server, threading.Thread, str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise SystemExit("uvicorn did not start")
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}"


def fetch_ms(url: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        response.read()
        if response.status != 200:
            raise SystemExit(f"{url}: HTTP {response.status}")
    return (time.perf_counter() - start) * 1000


async def fill(url: str, schema: str, rows: int) -> float:
    app = Soniq(f"{url}?namespace={schema}")
    await app.setup()
    await app.close()
    conn = await asyncpg.connect(url)
    try:
        start = time.perf_counter()
        await conn.execute(FILL.format(s=schema), rows)
        await conn.execute(FILL_DEAD.format(s=schema))
        await conn.execute(f"VACUUM ANALYZE {schema}.soniq_jobs")
        await conn.execute(f"VACUUM ANALYZE {schema}.soniq_dead_letter_jobs")
        return time.perf_counter() - start
    finally:
        await conn.close()


async def refresh_ms(url: str, runs: int) -> float:
    app = Soniq(url)
    await app.connect()
    try:
        reads = DashboardReads(app)
        await reads.overview()
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            await reads.overview()
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)
    finally:
        await app.close()


async def drop(url: str, schema: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    schema = f"bench_dash_{uuid.uuid4().hex[:8]}"
    seconds = asyncio.run(fill(args.url, schema, args.rows))
    print(f"filled {args.rows:,} rows in {seconds:.1f}s (schema {schema})")
    app = Soniq(f"{args.url}?namespace={schema}")
    server, thread, base = serve(create_dashboard_app(app, manage_app=True))
    now = datetime.now(UTC)
    deep = encode_cursor(JobCursor(at=now - timedelta(hours=14), id="j"))
    second = encode_cursor(JobCursor(at=now, id="j"))
    pages = [
        ("overview", "/"),
        ("jobs, first page", "/jobs"),
        ("jobs, status=queued", "/jobs?status=queued"),
        ("jobs, queue=emails", "/jobs?queue=emails"),
        ("jobs, next page", f"/jobs?after={second}"),
        ("jobs, page at row 500,000", f"/jobs?after={deep}"),
        ("jobs, name starts with bench.job_7", "/jobs?name=bench.job_7"),
        ("jobs, search by id", f"/jobs?q=j{args.rows // 2:09d}"),
        ("job detail", f"/jobs/j{args.rows // 2:09d}"),
        ("dead letters", "/dead-letters"),
        ("workers", "/workers"),
        ("schedules", "/schedules"),
        ("live fragment, overview", "/?partial=live"),
    ]
    results = []
    try:
        first = fetch_ms(base + "/")
        results.append(("overview, first request after start", "/", first))
        print(f"{'overview, first request':<28} {first:9.1f} ms", flush=True)
        for label, path in pages:
            for _ in range(2):
                fetch_ms(base + path)
            times = [fetch_ms(base + path) for _ in range(args.runs)]
            median = statistics.median(times)
            results.append((label, path, median))
            verdict = "ok" if median < BUDGET_MS else f"OVER by {median - BUDGET_MS:.0f} ms"
            print(f"{label:<28} {median:9.1f} ms  {verdict}", flush=True)
        refresh = asyncio.run(refresh_ms(f"{args.url}?namespace={schema}", min(args.runs, 5)))
        results.append(("overview snapshot refresh (background, not a page)", "", refresh))
        print(f"{'overview snapshot refresh':<28} {refresh:9.1f} ms", flush=True)
    finally:
        server.should_exit = True
        thread.join(30)
        asyncio.run(drop(args.url, schema))
    print()
    print(f"| page ({args.rows:,} rows, median of {args.runs}) | ms | under {BUDGET_MS:.0f} ms |")
    print("|---|---|---|")
    for label, _path, median in results:
        verdict = "n/a" if not _path else ("yes" if median < BUDGET_MS else "no")
        print(f"| {label} | {median:.1f} | {verdict} |")


if __name__ == "__main__":
    main()
