"""The driver body shared by the two systems whose import name is `soniq` (ours and 0.1.0).

Each subclass says how it builds the app, connects it, and which jobs
module and environment its worker gets; everything measured is the same.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import asyncpg

from _harness import Driver


class SoniqShapedDriver(Driver):
    supports_sqlite = True
    jobs_module = ""

    def __init__(self) -> None:
        self.app: Any = None

    def build(self, url: str) -> Any:
        raise NotImplementedError

    async def connect(self, app: Any) -> None:
        raise NotImplementedError

    def worker_env(self, url: str) -> dict[str, str]:
        return {"SONIQ_DATABASE_URL": url}

    def _app(self, url: str) -> Any:
        app = self.build(url)

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
        await self.connect(self.app)

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
        argv = [soniq, "worker", "--concurrency", str(concurrency), "--jobs-modules", self.jobs_module]
        return argv, self.worker_env(url)

    async def done_count(self, conn: asyncpg.Connection, total: int) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM soniq_jobs WHERE status = 'done'"))

    def sqlite_done_count(self, db: sqlite3.Connection, total: int) -> int:
        return int(db.execute("SELECT count(*) FROM soniq_jobs WHERE status = 'done'").fetchone()[0])
