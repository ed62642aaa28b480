"""(c) A worker on the minimal backend keeps the shutdown contract.

This store lives in one process, so a `soniq worker` process could not reach its rows: the worker
runs in the test's process instead (`Soniq.worker(install_signal_handlers=False)`), and the test
asks it to stop as SIGTERM would (`worker.stop("SIGTERM")`). The real-signal scenarios of the
contract suite are for stores shared across processes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from soniq import Soniq

FAST = {"heartbeat_interval": 0.2, "heartbeat_timeout": 1.0, "poll_interval": 0.05, "observers": ""}


async def _started(app: Soniq, **settings: Any) -> tuple[Any, asyncio.Task[Any]]:
    worker = app.worker(install_signal_handlers=False, **settings)
    task = asyncio.create_task(worker.run())
    return worker, task


def test_a_drain_lets_a_short_job_finish() -> None:
    async def main() -> None:
        app = Soniq("minimal://", shutdown_timeout=10, **FAST)
        started = asyncio.Event()

        @app.job(name="example.short")
        async def short() -> str:
            started.set()
            await asyncio.sleep(0.5)
            return "finished"

        job_id = await app.enqueue(short)
        worker, task = await _started(app)
        await asyncio.wait_for(started.wait(), 10)
        worker.stop("SIGTERM")
        summary = await asyncio.wait_for(task, 15)
        row = await app.get_job(job_id)
        assert row is not None
        assert (row["status"], row["result"], row["attempts"]) == ("done", "finished", 0)
        assert summary.nacked_job_ids == []
        await app.close()

    asyncio.run(main())


def test_the_shutdown_timeout_nacks_a_long_job_back_to_queued_with_attempts_unchanged() -> None:
    async def main() -> None:
        app = Soniq("minimal://", shutdown_timeout=0.3, **FAST)
        started = asyncio.Event()

        @app.job(name="example.long", max_retries=3)
        async def long() -> None:
            started.set()
            await asyncio.sleep(3600)

        job_id = await app.enqueue(long)
        worker, task = await _started(app)
        await asyncio.wait_for(started.wait(), 10)
        running = await app.get_job(job_id)
        assert running is not None
        assert (running["status"], running["attempts"]) == ("processing", 0)
        worker.stop("SIGTERM")
        summary = await asyncio.wait_for(task, 15)
        assert summary.nacked_job_ids == [job_id]
        row = await app.get_job(job_id)
        assert row is not None
        assert (row["status"], row["worker_id"], row["attempts"], row["last_error"]) == ("queued", None, 0, None)
        # The handler had started, so the shutdown counts against the job's max_shutdown_nacks.
        assert row["shutdown_nacks"] == 1
        await app.close()

    asyncio.run(main())
