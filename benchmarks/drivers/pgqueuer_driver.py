"""pgqueuer (latest from PyPI). Finished jobs leave its queue table, so done = enqueued - left.

Worker: pgqueuer's own CLI, `pgq run jobs_pgqueuer:create` (through pgq_cli.py,
which works around a crash of 1.6.0's CLI at start and changes nothing else).
BENCH_PGQ_MODE picks the configuration:

- `default` (column "pgqueuer"): `pgq run` with its defaults, batch size 10 and
  no cap on concurrent tasks: how a user runs it;
- `eq` (column "pgqueuer-eq"): equal concurrency with ours,
  `--max-concurrent-tasks C --batch-size C/2` (pgqueuer requires
  max_concurrent_tasks >= 2 x batch_size).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import asyncpg

from _harness import Driver, main


class PgqueuerDriver(Driver):
    name = "pgqueuer"

    def __init__(self) -> None:
        self.mode = os.environ.get("BENCH_PGQ_MODE", "default")
        if self.mode not in ("default", "eq"):
            raise SystemExit(f"BENCH_PGQ_MODE must be default or eq, got {self.mode!r}")
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
        argv = [sys.executable, "pgq_cli.py", "run", "jobs_pgqueuer:create"]
        if self.mode == "eq":
            argv += ["--max-concurrent-tasks", str(concurrency), "--batch-size", str(max(1, concurrency // 2))]
        return argv, {"BENCH_DATABASE_URL": url}

    async def done_count(self, conn: asyncpg.Connection, total: int) -> int:
        return total - int(await conn.fetchval("SELECT count(*) FROM pgqueuer"))


if __name__ == "__main__":
    main(PgqueuerDriver())
