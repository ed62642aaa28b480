"""This repository's soniq (soniq-core + soniq-postgres + soniq-sqlite, installed editable).

Worker: `soniq worker --concurrency C --jobs-modules jobs_ours` with
SONIQ_DATABASE_URL and SONIQ_OBSERVERS= (empty: no observer loads).
"""

from __future__ import annotations

import os
from typing import Any

from _harness import main
from _soniq_driver import SoniqShapedDriver

os.environ["SONIQ_OBSERVERS"] = ""


class OursDriver(SoniqShapedDriver):
    name = "ours"
    jobs_module = "jobs_ours"

    def build(self, url: str) -> Any:
        from soniq import Soniq

        return Soniq(url)

    async def connect(self, app: Any) -> None:
        await app.connect()

    def worker_env(self, url: str) -> dict[str, str]:
        return {"SONIQ_DATABASE_URL": url, "SONIQ_OBSERVERS": ""}


if __name__ == "__main__":
    main(OursDriver())
