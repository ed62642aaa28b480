"""Stale recovery writes on a lost worker's row that it stopped it, and which rows it took."""

from __future__ import annotations

from typing import Any

import pytest

from soniq import Soniq
from soniq.params import ClaimJobsParams, RegisterWorkerParams, SetWorkerStatusParams
from soniq.records import StaleJobPolicy, WorkerInfo, WorkerStatus
from soniq.rescue import sweep_stale_workers

pytestmark = pytest.mark.asyncio


async def test_recovery_records_the_rows_it_took_and_keeps_a_workers_own_summary() -> None:
    app = Soniq("memory://")

    @app.job(name="work", max_retries=2)
    async def work(n: int) -> None: ...

    backend = await app.connected_backend()
    try:
        for worker_id in ("w-killed", "w-left"):
            info = WorkerInfo(id=worker_id, hostname="h", pid=1, queues=None, concurrency=2)
            await backend.register_worker(RegisterWorkerParams(worker=info))
        started = await app.enqueue(work, n=1)
        unstarted = await app.enqueue(work, n=2)
        claimed = await backend.claim_jobs(ClaimJobsParams("w-killed", None, limit=1, mark_started=True))
        assert [r.id for r in claimed] == [started]
        claimed = await backend.claim_jobs(ClaimJobsParams("w-killed", None, limit=1, mark_started=False))
        assert [r.id for r in claimed] == [unstarted]
        # A worker that reached STOPPED itself but left rows to recovery: it stays `stopping`.
        own: dict[str, Any] = {"states": [{"state": "STOPPED"}], "unsettled": ["x"], "drained": False}
        await backend.set_worker_status(
            SetWorkerStatusParams("w-left", WorkerStatus.STOPPING, state="STOPPED", last_shutdown=own)
        )
        heartbeats = {w.id: w.last_heartbeat for w in await backend.list_workers()}

        result = await sweep_stale_workers(backend, heartbeat_timeout=0.0, policy=StaleJobPolicy.REQUEUE)

        assert sorted(result.stale_workers) == ["w-killed", "w-left"]
        rows = {w.id: w for w in await backend.list_workers()}
        killed = rows["w-killed"]
        assert (killed.status, killed.state) == (WorkerStatus.STOPPED, None)  # the state is left as it was
        record = dict(killed.last_shutdown or {})
        assert record["recovered"] is True
        assert record["heartbeat_timeout"] == 0.0
        assert record["last_heartbeat"] == heartbeats["w-killed"].isoformat()
        assert isinstance(record["recovered_at"], str)
        assert sorted(record["rescued"], key=lambda r: r["job_id"] != started) == [
            {"job_id": started, "action": "requeue"},
            {"job_id": unstarted, "action": "release"},
        ]
        left = dict(rows["w-left"].last_shutdown or {})
        assert {k: left[k] for k in own} == own
        assert (left["recovered"], left["rescued"]) == (True, [])
    finally:
        await app.close()
