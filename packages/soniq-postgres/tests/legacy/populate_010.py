"""Run by soniq 0.1.0's own interpreter (a throwaway virtualenv): set up its schema and leave
one row of every kind behind, then print their ids as JSON on stdout.

Usage: python populate_010.py DATABASE_URL
"""

import asyncio
import json
import os
import sys
from datetime import UTC, datetime, timedelta

# Rows for jobs this process does not register ('legacy.send'), as a producer would enqueue them.
os.environ["SONIQ_ENQUEUE_VALIDATION"] = "none"

from soniq import Soniq

URL = sys.argv[1]
app = Soniq(database_url=URL)


@app.job(name="legacy.ok", queue="work", retries=0)
async def ok(n: int) -> dict:
    return {"doubled": n * 2}


@app.job(name="legacy.bad", queue="work", retries=0)
async def bad(n: int) -> None:
    raise RuntimeError(f"boom {n}")


async def main() -> None:
    await app.setup()
    ids: dict = {}
    # Rows the 0.1.0 worker finishes: one done with a result, one dead-lettered.
    ids["done"] = await app.enqueue("legacy.ok", args={"n": 21})
    ids["dead_source"] = await app.enqueue("legacy.bad", args={"n": 7})
    await app.run_worker(concurrency=1, run_once=True, queues=["work"])
    # Rows left for the new release.
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
    await app.scheduler.add("legacy.report", every=3600, args={"kind": "hourly"}, queue="reports", priority=7)
    await app.scheduler.add("legacy.nightly", cron="0 3 * * *", args={}, queue="reports")
    backend = app._backend
    pool = backend._pool if hasattr(backend, "_pool") else backend.pool
    async with pool.acquire() as conn:
        # A 0.1.0 worker that died mid-job ten minutes ago: its row is still 'processing'.
        wid = await conn.fetchval(
            "INSERT INTO soniq_workers (id, hostname, pid, queues, concurrency, status, last_heartbeat, started_at)"
            " VALUES (gen_random_uuid(), 'old-host', 4242, '{mail}', 1, 'active', now() - interval '10 minutes',"
            " now() - interval '1 hour') RETURNING id"
        )
        await conn.execute(
            "UPDATE soniq_jobs SET status = 'processing', worker_id = $1, attempts = 1,"
            " updated_at = now() - interval '10 minutes' WHERE id = $2::uuid",
            wid,
            ids["processing"],
        )
        ids["dead"] = str(await conn.fetchval("SELECT id FROM soniq_dead_letter_jobs LIMIT 1"))
    await app.close()
    print(json.dumps(ids))


asyncio.run(main())
