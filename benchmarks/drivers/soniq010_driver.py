"""The published soniq 0.1.0 from PyPI, in its own venv (its import name is also `soniq`).

Worker: `soniq worker --concurrency C --jobs-modules jobs_soniq010` with
SONIQ_DATABASE_URL, all other settings at their defaults.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import asyncpg

from _harness import Driver, main


class Soniq010Driver(Driver):
    name = "soniq010"
    supports_sqlite = True

    def __init__(self) -> None:
        self.app: Any = None

    def _app(self, url: str) -> Any:
        from soniq import Soniq

        app = Soniq(database_url=url)

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
        await self.app.ensure_initialized()

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
        argv = [soniq, "worker", "--concurrency", str(concurrency), "--jobs-modules", "jobs_soniq010"]
        return argv, {"SONIQ_DATABASE_URL": url, "SONIQ_JOBS_MODULES": "jobs_soniq010"}

    async def done_count(self, conn: asyncpg.Connection, total: int) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM soniq_jobs WHERE status = 'done'"))

    def sqlite_done_count(self, db: sqlite3.Connection, total: int) -> int:
        return int(db.execute("SELECT count(*) FROM soniq_jobs WHERE status = 'done'").fetchone()[0])


if __name__ == "__main__":
    main(Soniq010Driver())
