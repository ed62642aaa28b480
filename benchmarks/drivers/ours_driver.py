"""This repository's soniq (soniq-core + soniq-postgres + soniq-sqlite, installed editable).

Worker: `soniq worker --concurrency C --jobs-modules jobs_ours` with
SONIQ_DATABASE_URL and SONIQ_OBSERVERS= (empty: no observer loads).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import asyncpg

from _harness import Driver, main

os.environ["SONIQ_OBSERVERS"] = ""


class OursDriver(Driver):
    name = "ours"
    supports_sqlite = True

    def __init__(self) -> None:
        self.app: Any = None

    def _app(self, url: str) -> Any:
        from soniq import Soniq

        app = Soniq(url)

        @app.job(name="noop")
        async def noop(n: int = 0, t: float | None = None) -> None:
            return None

        self.noop = noop
        return app

    async def setup(self, url: str) -> None:
        app = self._app(url)
        try:
            await app.setup()
        finally:
            await app.close()

    async def open(self, url: str) -> None:
        self.app = self._app(url)
        await self.app.connect()

    async def close(self) -> None:
        if self.app is not None:
            await self.app.close()
            self.app = None

    async def enqueue_one(self, args: dict[str, Any]) -> None:
        await self.app.enqueue(self.noop, **args)

    async def enqueue_bulk(self, args_list: list[dict[str, Any]]) -> None:
        await self.app.enqueue_many(self.noop, args_list)

    def worker_command(self, url: str, concurrency: int) -> tuple[list[str], dict[str, str]]:
        soniq = shutil.which("soniq", path=str(Path(sys.executable).parent)) or "soniq"
        argv = [soniq, "worker", "--concurrency", str(concurrency), "--jobs-modules", "jobs_ours"]
        return argv, {"SONIQ_DATABASE_URL": url, "SONIQ_OBSERVERS": ""}

    async def done_count(self, conn: asyncpg.Connection, total: int) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM soniq_jobs WHERE status = 'done'"))

    def sqlite_done_count(self, db: sqlite3.Connection, total: int) -> int:
        return int(db.execute("SELECT count(*) FROM soniq_jobs WHERE status = 'done'").fetchone()[0])


if __name__ == "__main__":
    main(OursDriver())
