"""arq (latest from PyPI), on the bench's Redis database (BENCH_REDIS_DB, default 12).

Worker: arq's own CLI, `arq jobs_arq.WorkerSettings`, at its defaults
(max_jobs 10, the same concurrency as ours). A finished job leaves arq's
queue (a sorted set), so done = enqueued - left in `arq:queue`. Before and
after a run the `arq:*` keys of that database are deleted, nothing else.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path
from typing import Any

import asyncpg

from _harness import REDIS_URL, Driver, main
from jobs_arq import REDIS_SETTINGS

QUEUE = "arq:queue"


class ArqDriver(Driver):
    name = "arq"
    supports_postgres = False
    supports_redis = True

    def __init__(self) -> None:
        self.pool: Any = None

    async def _delete_own_keys(self) -> None:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            batch: list[bytes] = []
            async for key in client.scan_iter(match="arq:*", count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    await client.unlink(*batch)
                    batch = []
            if batch:
                await client.unlink(*batch)
        finally:
            await client.aclose()

    async def redis_fresh(self) -> str:
        await self._delete_own_keys()
        return REDIS_URL

    async def redis_cleanup(self) -> None:
        await self._delete_own_keys()

    async def redis_done_count(self, client: Any, total: int) -> int:
        return total - int(await client.zcard(QUEUE))

    async def setup(self, url: str) -> None:
        return None

    async def open(self, url: str) -> None:
        from arq import create_pool

        self.pool = await create_pool(REDIS_SETTINGS)

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.aclose()
            self.pool = None

    async def enqueue_one(self, args: dict[str, Any]) -> None:
        await self.pool.enqueue_job("noop", **args)

    async def enqueue_bulk(self, args_list: list[dict[str, Any]]) -> None:
        # arq has no bulk enqueue: 100 enqueue_job calls in flight at a time.
        for start in range(0, len(args_list), 100):
            await asyncio.gather(*(self.pool.enqueue_job("noop", **a) for a in args_list[start : start + 100]))

    def worker_command(self, url: str, concurrency: int) -> tuple[list[str], dict[str, str]]:
        arq = shutil.which("arq", path=str(Path(sys.executable).parent)) or "arq"
        return [arq, "jobs_arq.WorkerSettings"], {}

    async def done_count(self, conn: asyncpg.Connection, total: int) -> int:
        raise NotImplementedError("arq runs on Redis only")


if __name__ == "__main__":
    main(ArqDriver())
