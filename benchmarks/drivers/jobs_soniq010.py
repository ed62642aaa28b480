"""The bench job for the published soniq 0.1.0 (its own venv; same import name as ours)."""

from __future__ import annotations

import os

from soniq import Soniq

from _latency import record_pickup

app = Soniq(database_url=os.environ["SONIQ_DATABASE_URL"])


@app.job(name="noop")
async def noop(n: int = 0, t: float | None = None) -> None:
    record_pickup(t)
