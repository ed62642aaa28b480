"""`soniq worker --run-once` on Redis exits cleanly: nothing on stderr about an abandoned task (17.14).

The worker stops its idle wait when it drains and closes the backend; the
wait must not then trip over the listener that close just cleared.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from soniq.params import EnqueueJobsParams, QueueStatsParams
from soniq_redis import RedisBackend

pytestmark = pytest.mark.asyncio

RUNS = 3
JOBS = 5


def _jobs_module(folder: Path, url: str) -> str:
    name = f"run_once_jobs_{uuid.uuid4().hex[:8]}"
    folder.joinpath(f"{name}.py").write_text(
        textwrap.dedent(
            f"""
            from soniq import Soniq

            app = Soniq({url!r})


            @app.job(name="run_once.echo")
            async def echo(n: int) -> int:
                return n
            """
        )
    )
    return name


async def test_run_once_worker_exits_without_task_errors(redis_url: str, tmp_path: Path, make_job: Any) -> None:
    namespace = f"soniq_run_once_{uuid.uuid4().hex[:10]}"
    url = f"{redis_url}?namespace={namespace}"
    module = _jobs_module(tmp_path, url)
    backend = RedisBackend.from_url(redis_url, namespace=namespace)
    await backend.connect()
    try:
        # The abandoned wait is a race with the exit: several runs make a miss unlikely.
        for run in range(RUNS):
            jobs = [make_job(job_name="run_once.echo", args={"n": n}) for n in range(JOBS)]
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
            completed = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "soniq", "worker", "--jobs-modules", module, "--run-once"],
                cwd=tmp_path,
                env={**os.environ, "PYTHONPATH": str(tmp_path)},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert completed.returncode == 0, completed.stderr
            for marker in ("Task exception was never retrieved", "Traceback", "has no attribute"):
                assert marker not in completed.stderr, f"run {run}: {marker!r} on stderr:\n{completed.stderr}"
            stats = await backend.queue_stats(QueueStatsParams())
            assert (stats.done, stats.queued, stats.processing) == (JOBS * (run + 1), 0, 0)
    finally:
        try:
            await backend.drop_schema()
        finally:
            await backend.close()
