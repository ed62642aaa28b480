"""procrastinate (latest from PyPI) on psycopg 3. Done = rows with status 'succeeded'.

Worker: `procrastinate --app=jobs_procrastinate.app worker --concurrency C`.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import asyncpg

from _harness import Driver, main


class ProcrastinateDriver(Driver):
    name = "procrastinate"

    def __init__(self) -> None:
        self.app: Any = None
        self.opened: Any = None

    def _app(self, url: str) -> Any:
        # The app lives in the jobs module (procrastinate warns about one in __main__).
        os.environ["BENCH_DATABASE_URL"] = url
        import jobs_procrastinate

        self.noop = jobs_procrastinate.noop
        return jobs_procrastinate.app

    async def setup(self, url: str) -> None:
        app = self._app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    async def open(self, url: str) -> None:
        self.app = self._app(url)
        self.opened = self.app.open_async()
        await self.opened.__aenter__()

    async def close(self) -> None:
        if self.opened is not None:
            await self.opened.__aexit__(None, None, None)
            self.opened = self.app = None

    async def enqueue_one(self, args: dict[str, Any]) -> None:
        await self.noop.defer_async(**args)

    async def enqueue_bulk(self, args_list: list[dict[str, Any]]) -> None:
        await self.noop.batch_defer_async(*args_list)

    def worker_command(self, url: str, concurrency: int) -> tuple[list[str], dict[str, str]]:
        cli = shutil.which("procrastinate", path=str(Path(sys.executable).parent)) or "procrastinate"
        argv = [cli, "--app=jobs_procrastinate.app", "worker", "--concurrency", str(concurrency)]
        return argv, {"BENCH_DATABASE_URL": url}

    async def done_count(self, conn: asyncpg.Connection, total: int) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"))


if __name__ == "__main__":
    main(ProcrastinateDriver())
