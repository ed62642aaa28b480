"""The bench job for procrastinate (`procrastinate --app=jobs_procrastinate.app worker`)."""

from __future__ import annotations

import os

import procrastinate

from _latency import record_pickup

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ["BENCH_DATABASE_URL"]))


@app.task(name="noop")
async def noop(n: int = 0, t: float | None = None) -> None:
    record_pickup(t)
