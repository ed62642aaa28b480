"""pgqueuer (latest from PyPI). Finished jobs leave its queue table, so done = enqueued - left.

Worker: what `pgq run jobs_pgqueuer:create --max-concurrent-tasks C` runs
(`pgqueuer.run`, default batch size 10); see jobs_pgqueuer.py for why not the CLI.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import asyncpg

from _harness import Driver, main


class PgqueuerDriver(Driver):
    name = "pgqueuer"

    def __init__(self) -> None:
        self.conn: asyncpg.Connection | None = None
        self.queries: Any = None

    async def setup(self, url: str) -> None:
        from pgqueuer import AsyncpgDriver, Queries

        conn = await asyncpg.connect(url)
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    async def open(self, url: str) -> None:
        from pgqueuer import AsyncpgDriver, Queries

        self.conn = await asyncpg.connect(url)
        self.queries = Queries(AsyncpgDriver(self.conn))

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    async def enqueue_one(self, args: dict[str, Any]) -> None:
        await self.queries.enqueue("noop", json.dumps(args).encode(), 0)

    async def enqueue_bulk(self, args_list: list[dict[str, Any]]) -> None:
        count = len(args_list)
        await self.queries.enqueue(["noop"] * count, [json.dumps(a).encode() for a in args_list], [0] * count)

    def worker_command(self, url: str, concurrency: int) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, "jobs_pgqueuer.py", str(concurrency)], {"BENCH_DATABASE_URL": url}

    async def done_count(self, conn: asyncpg.Connection, total: int) -> int:
        return total - int(await conn.fetchval("SELECT count(*) FROM pgqueuer"))


if __name__ == "__main__":
    main(PgqueuerDriver())
