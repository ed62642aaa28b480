"""The bench job for the published soniq 0.1.0 (its own venv; same import name as ours)."""

from __future__ import annotations

import os

from _latency import record_pickup

from soniq import Soniq

app = Soniq(database_url=os.environ["SONIQ_DATABASE_URL"])


@app.job(name="noop")
async def noop(n: int = 0, t: float | None = None) -> None:
    record_pickup(t)
