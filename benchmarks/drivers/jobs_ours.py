"""The bench job for this repository's soniq (imported by `soniq worker --jobs-modules jobs_ours`)."""

from __future__ import annotations

from soniq import Soniq

from _latency import record_pickup

app = Soniq()


@app.job(name="noop")
async def noop(n: int = 0, t: float | None = None) -> None:
    record_pickup(t)
