"""The bench job for pgqueuer, and its worker: `python jobs_pgqueuer.py CONCURRENCY`."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from pgqueuer import AsyncpgDriver, PgQueuer
from pgqueuer.models import Job

from _latency import record_pickup


@asynccontextmanager
async def create() -> AsyncIterator[PgQueuer]:
    connection = await asyncpg.connect(os.environ["BENCH_DATABASE_URL"])
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        args = json.loads(job.payload) if job.payload else {}
        record_pickup(args.get("t"))

    try:
        yield pgq
    finally:
        await connection.close()


if __name__ == "__main__":
    # `pgq run` of pgqueuer 1.6.0 crashes at start in its log set-up (a str where
    # it expects an enum), so this calls what the CLI calls: `pgq run
    # jobs_pgqueuer:create --max-concurrent-tasks C --batch-size C/2` (pgqueuer
    # requires max_concurrent_tasks >= 2 x batch_size).
    import asyncio
    import logging
    import sys

    import pgqueuer

    logging.basicConfig(level=logging.INFO)
    concurrency = int(sys.argv[1])
    asyncio.run(pgqueuer.run(create, max_concurrent_tasks=concurrency, batch_size=max(1, concurrency // 2)))
