"""The worker writes each shutdown state, and at STOPPED what the shutdown did, to its worker row."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from soniq import Soniq

from .conftest import _wait_until

pytestmark = pytest.mark.asyncio


async def _worker_row(app: Soniq, worker_id: str) -> Any:
    backend = await app.connected_backend()
    return next(w for w in await backend.list_workers() if w.id == worker_id)


async def test_a_forced_shutdown_is_written_with_its_nacked_rows(fast_settings: dict[str, Any]) -> None:
    app = Soniq("memory://", **{**fast_settings, "shutdown_timeout": 0.2})
    release = asyncio.Event()

    @app.job()
    async def hangs() -> None:
        await release.wait()

    job_id = await app.enqueue(hangs)
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())

    async def running() -> bool:
        row = await app.get_job(job_id)
        return row is not None and row["status"] == "processing"

    deadline = asyncio.get_running_loop().time() + 5
    while not await running():
        assert asyncio.get_running_loop().time() < deadline, "the job never started"
        await asyncio.sleep(0.01)
    worker.stop("SIGTERM")
    await asyncio.wait_for(task, 10)
    row = await _worker_row(app, worker.worker_id)
    assert row.state == "STOPPED"
    assert row.status.value == "stopped"
    shutdown = row.last_shutdown
    assert [step["state"] for step in shutdown["states"]] == ["RUNNING", "DRAINING", "FORCE_TIMEOUT_PATH", "STOPPED"]
    assert shutdown["nacked"] == [{"job_id": job_id, "reason": "shutdown_timeout"}]
    assert shutdown["drained"] is False
    assert shutdown["unsettled"] == []
    assert shutdown["trigger"] == "SIGTERM"
    await app.close()


async def test_an_idle_shutdown_is_written_as_drained(fast_settings: dict[str, Any]) -> None:
    app = Soniq("memory://", **fast_settings)

    @app.job()
    async def never_enqueued() -> None: ...

    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    store: Any = app.backend
    await _wait_until(lambda: worker.worker_id in store.workers, timeout=5)
    worker.stop("SIGTERM")
    await asyncio.wait_for(task, 5)
    row = await _worker_row(app, worker.worker_id)
    assert row.state == "STOPPED"
    assert row.last_shutdown["drained"] is True
    assert row.last_shutdown["nacked"] == []
    assert (row.last_shutdown["stuck"], row.last_shutdown["lost_threads"]) == ([], [])
    await app.close()


async def test_a_thread_past_its_deadline_is_in_the_written_shutdown(fast_settings: dict[str, Any]) -> None:
    app = Soniq("memory://", **fast_settings)
    gate = threading.Event()

    @app.job(max_retries=0, timeout=0.2)
    def hangs() -> None:
        gate.wait(30)

    job_id = await app.enqueue(hangs)
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    await _wait_until(lambda: app.dead_letter.get(job_id), timeout=10)
    worker.stop("SIGTERM")
    gate.set()
    await asyncio.wait_for(task, 10)
    row = await _worker_row(app, worker.worker_id)
    assert row.state == "STOPPED"
    assert row.last_shutdown["lost_threads"] == [job_id]
    await app.close()
