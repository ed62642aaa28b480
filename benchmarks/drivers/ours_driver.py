"""This repository's soniq (soniq-core + soniq-postgres + soniq-sqlite + soniq-redis, installed editable).

Worker: `soniq worker --concurrency C --jobs-modules jobs_ours` with
SONIQ_DATABASE_URL and SONIQ_OBSERVERS= (empty: no observer loads). The same
driver runs the "ours-speed" column, whose venv also has uvloop and orjson.

On Redis (`process --redis`) the store is the bench's Redis database with the
namespace `bench` (every key under `soniq:{bench}:`); the run deletes that
namespace's keys before and after, and nothing else.
"""

from __future__ import annotations

import os
from typing import Any

import asyncpg

from _harness import REDIS_URL, main
from _soniq_driver import SoniqShapedDriver

os.environ["SONIQ_OBSERVERS"] = ""
REDIS_NAMESPACE = "bench"
OLD_JOB_NAME = "bench.old"


class OursDriver(SoniqShapedDriver):
    name = "ours"
    jobs_module = "jobs_ours"
    supports_redis = True

    def build(self, url: str) -> Any:
        from soniq import Soniq

        return Soniq(url)

    async def connect(self, app: Any) -> None:
        await app.connect()

    def worker_env(self, url: str) -> dict[str, str]:
        return {"SONIQ_DATABASE_URL": url, "SONIQ_OBSERVERS": ""}

    # -- Redis ---------------------------------------------------------------------

    @staticmethod
    def redis_url() -> str:
        return f"{REDIS_URL}?namespace={REDIS_NAMESPACE}"

    async def redis_fresh(self) -> str:
        url = self.redis_url()
        app = self._app(url)
        try:
            await app.connect()
            await app.backend.drop_schema()
            await app.setup()
        finally:
            await app.close()
        return url

    async def redis_cleanup(self) -> None:
        app = self._app(self.redis_url())
        try:
            await app.connect()
            await app.backend.drop_schema()
        finally:
            await app.close()

    async def redis_done_count(self, client: Any, total: int) -> int:
        # The status index soniq-redis keeps: one sorted set of the ids of every done row.
        return int(await client.zcard(f"soniq:{{{REDIS_NAMESPACE}}}:st:done"))

    # -- depth -----------------------------------------------------------------------

    async def add_done_rows(self, conn: asyncpg.Connection, count: int) -> None:
        await conn.execute(
            """
            INSERT INTO soniq_jobs
                (id, job_name, args, status, attempts, max_attempts, queue, priority, scheduled_at,
                 created_at, updated_at, result, expires_at)
            SELECT 'old-' || g::text, $2, '{}', 'done', 1, 1, 'default', 100,
                   now() - interval '2 days', now() - interval '2 days', now() - interval '2 days',
                   'null', now() - interval '1 day'
            FROM generate_series(1, $1) AS g
            """,
            count,
            OLD_JOB_NAME,
        )

    async def pending_count(self, conn: asyncpg.Connection) -> int | None:
        # Each half matches a partial index (the claim index, the processing index), so this
        # reads only the unfinished rows however many finished ones the table holds.
        return int(
            await conn.fetchval(
                "SELECT (SELECT count(*) FROM soniq_jobs WHERE status = 'queued' AND waiting_on = 0)"
                " + (SELECT count(*) FROM soniq_jobs WHERE status = 'processing')"
            )
        )

    async def old_rows(self, url: str) -> int | None:
        conn = await asyncpg.connect(url)
        try:
            return int(await conn.fetchval("SELECT count(*) FROM soniq_jobs WHERE id LIKE 'old-%'"))
        finally:
            await conn.close()


if __name__ == "__main__":
    main(OursDriver())
