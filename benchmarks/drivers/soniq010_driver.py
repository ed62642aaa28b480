"""The published soniq 0.1.0 from PyPI, in its own venv (its import name is also `soniq`).

Worker: `soniq worker --concurrency C --jobs-modules jobs_soniq010` with
SONIQ_DATABASE_URL, all other settings at their defaults.
"""

from __future__ import annotations

from typing import Any

from _harness import main
from _soniq_driver import SoniqShapedDriver


class Soniq010Driver(SoniqShapedDriver):
    name = "soniq010"
    jobs_module = "jobs_soniq010"

    def build(self, url: str) -> Any:
        from soniq import Soniq

        return Soniq(database_url=url)

    async def connect(self, app: Any) -> None:
        await app.ensure_initialized()

    def worker_env(self, url: str) -> dict[str, str]:
        return {"SONIQ_DATABASE_URL": url, "SONIQ_JOBS_MODULES": self.jobs_module}


if __name__ == "__main__":
    main(Soniq010Driver())
