"""The bench job for pgqueuer: the factory `pgq run jobs_pgqueuer:create` loads (see pgq_cli.py)."""

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
