"""The limit: a hand-written asyncpg queue on a table shaped like soniq_jobs.

Enqueue is one `INSERT ... ; pg_notify` statement per job, bulk is one COPY.
The worker (`raw.py worker`) is one loop on one connection: claim up to
BENCH_RAW_BATCH rows with FOR UPDATE SKIP LOCKED, decode their args, mark
them done in one statement, repeat; idle, it waits on LISTEN.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from typing import Any

import asyncpg

from _harness import Driver, main
from _latency import record_pickup

SCHEMA = """
CREATE TABLE raw_jobs (
    id            text        PRIMARY KEY,
    job_name      text        NOT NULL,
    args          json        NOT NULL DEFAULT '{}',
    status        text        NOT NULL DEFAULT 'queued'
                  CHECK (status IN ('queued', 'processing', 'done', 'cancelled')),
    attempts      integer     NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL DEFAULT 1,
    queue         text        NOT NULL DEFAULT 'default',
    priority      integer     NOT NULL DEFAULT 100,
    scheduled_at  timestamptz NOT NULL DEFAULT now(),
    last_error    text,
    worker_id     text,
    result        json,
    started_at    timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX raw_jobs_claim_idx ON raw_jobs (priority, scheduled_at, created_at, id) WHERE status = 'queued';
CREATE INDEX raw_jobs_queue_status_idx ON raw_jobs (queue, status);
"""

INSERT = """
WITH j AS (INSERT INTO raw_jobs (id, job_name, args, max_attempts) VALUES ($1, $2, $3::json, 4) RETURNING 1)
SELECT pg_notify('raw_jobs', 'default') FROM j"""
CLAIM = """
WITH picked AS (
    SELECT id FROM raw_jobs WHERE status = 'queued' AND scheduled_at <= now()
    ORDER BY priority, scheduled_at, created_at, id LIMIT $2 FOR UPDATE SKIP LOCKED
)
UPDATE raw_jobs AS j SET status = 'processing', worker_id = $1, started_at = now(), updated_at = now()
FROM picked WHERE j.id = picked.id
RETURNING j.id, j.args::text"""
COMPLETE = """
UPDATE raw_jobs SET status = 'done', worker_id = NULL, updated_at = now()
WHERE id = ANY($1::text[]) AND status = 'processing' AND worker_id = $2"""
COLUMNS = ["id", "job_name", "args", "max_attempts"]


class RawDriver(Driver):
    def __init__(self) -> None:
        self.batch = int(os.environ.get("BENCH_RAW_BATCH", "1"))
        self.name = f"raw{self.batch}"
        self.conn: asyncpg.Connection | None = None

    async def setup(self, url: str) -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(SCHEMA)
        finally:
            await conn.close()

    async def open(self, url: str) -> None:
        self.conn = await asyncpg.connect(url)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    async def enqueue_one(self, args: dict[str, Any]) -> None:
        assert self.conn is not None
        await self.conn.execute(INSERT, str(uuid.uuid4()), "noop", json.dumps(args))

    async def enqueue_bulk(self, args_list: list[dict[str, Any]]) -> None:
        assert self.conn is not None
        records = [(str(uuid.uuid4()), "noop", json.dumps(a), 4) for a in args_list]
        await self.conn.copy_records_to_table("raw_jobs", records=records, columns=COLUMNS)
        await self.conn.execute("SELECT pg_notify('raw_jobs', 'default')")

    def worker_command(self, url: str, concurrency: int) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, __file__, "worker"], {"RAW_DATABASE_URL": url, "BENCH_RAW_BATCH": str(self.batch)}

    async def done_count(self, conn: asyncpg.Connection, total: int) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM raw_jobs WHERE status = 'done'"))


async def run_worker() -> None:
    url = os.environ["RAW_DATABASE_URL"]
    batch = int(os.environ.get("BENCH_RAW_BATCH", "1"))
    worker_id = f"raw-{os.getpid()}"
    conn = await asyncpg.connect(url)
    wake = asyncio.Event()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await conn.add_listener("raw_jobs", lambda *_: wake.set())
    try:
        while not stop.is_set():
            wake.clear()
            rows = await conn.fetch(CLAIM, worker_id, batch)
            if not rows:
                waiters = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stop.wait())]
                await asyncio.wait(waiters, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
                for waiter in waiters:
                    waiter.cancel()
                continue
            for row in rows:
                record_pickup(json.loads(row[1]).get("t"))
            await conn.execute(COMPLETE, [row[0] for row in rows], worker_id)
    finally:
        await conn.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        asyncio.run(run_worker())
    else:
        main(RawDriver())
