"""The bench job for this repository's soniq (imported by `soniq worker --jobs-modules jobs_ours`)."""

from __future__ import annotations

from _latency import record_pickup

from soniq import Soniq

app = Soniq()


@app.job(name="noop")
async def noop(n: int = 0, t: float | None = None) -> None:
    record_pickup(t)
