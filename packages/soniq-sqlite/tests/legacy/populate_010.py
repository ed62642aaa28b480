"""Run by soniq 0.1.0's own interpreter (a throwaway virtualenv): set up its SQLite schema and
leave one row of every kind behind, then print their ids as JSON on stdout.

Usage: python populate_010.py PATH
"""

import asyncio
import json
import os
import sqlite3
import sys
from datetime import UTC, datetime, timedelta

# Rows for jobs this process does not register ('legacy.send'), as a producer would enqueue them.
os.environ["SONIQ_ENQUEUE_VALIDATION"] = "none"

from soniq import Soniq

PATH = sys.argv[1]
app = Soniq(database_url=PATH)


@app.job(name="legacy.ok", queue="work", retries=0)
async def ok(n: int) -> dict:
    return {"doubled": n * 2}


@app.job(name="legacy.bad", queue="work", retries=0)
async def bad(n: int) -> None:
    raise RuntimeError(f"boom {n}")


async def main() -> None:
    await app.setup()
    ids: dict = {}
    ids["done"] = await app.enqueue("legacy.ok", args={"n": 21})
    ids["dead_source"] = await app.enqueue("legacy.bad", args={"n": 7})
    await app.run_worker(concurrency=1, run_once=True, queues=["work"])
    ids["queued"] = await app.enqueue("legacy.send", args={"to": "a@example.com", "n": 1}, queue="mail", priority=5)
    ids["scheduled"] = await app.enqueue(
        "legacy.send",
        args={"to": "later@example.com"},
        queue="mail",
        scheduled_at=datetime.now(UTC) + timedelta(hours=2),
    )
    ids["unique"] = await app.enqueue(
        "legacy.send", args={"to": "u@example.com", "z": 1, "a": 2}, queue="mail", unique=True
    )
    ids["dedup"] = await app.enqueue("legacy.send", args={"to": "d@example.com"}, queue="mail", dedup_key="order-9")
    ids["processing"] = await app.enqueue("legacy.send", args={"to": "p@example.com"}, queue="mail")
    await app.close()
    ten_minutes_ago = (datetime.now(UTC) - timedelta(minutes=10)).isoformat()
    conn = sqlite3.connect(PATH)
    with conn:
        # A 0.1.0 worker that died mid-job ten minutes ago: its row is still 'processing'.
        conn.execute(
            "INSERT INTO soniq_workers (id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at)"
            " VALUES ('0b1d0000-0000-4000-8000-000000000001', 'old-host', 4242, '[\"mail\"]', 1, 'active', ?, ?)",
            (ten_minutes_ago, ten_minutes_ago),
        )
        conn.execute(
            "UPDATE soniq_jobs SET status = 'processing', worker_id = '0b1d0000-0000-4000-8000-000000000001',"
            " attempts = 1, updated_at = ? WHERE id = ?",
            (ten_minutes_ago, ids["processing"]),
        )
        ids["dead"] = conn.execute("SELECT id FROM soniq_dead_letter_jobs LIMIT 1").fetchone()[0]
    conn.close()
    print(json.dumps(ids))


asyncio.run(main())
