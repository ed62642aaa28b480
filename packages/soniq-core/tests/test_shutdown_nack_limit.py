"""`max_shutdown_nacks`: real `soniq worker` processes, real SIGTERMs, a handler that never returns.

Each SIGTERM cuts the started handler off at `shutdown_timeout` and hands the row back with its
attempts kept and one more `shutdown_nacks`; once the row has been handed back
`max_shutdown_nacks` times, the next shutdown moves it to the dead-letter table (`nack_limit`).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from soniq import Soniq, TaskRef

JOBS = """
import asyncio, os
from soniq import Soniq

namespace = os.environ.get("FOREVER_NS")
app = Soniq(os.environ["FOREVER_URL"], backend_options={"namespace": namespace} if namespace else None)


@app.job(name="forever", max_retries=3)
async def forever() -> None:
    with open(os.environ["FOREVER_MARK"], "a") as mark:
        mark.write("started\\n")
    await asyncio.sleep(3600)
"""


def started_count(mark: Path) -> int:
    return mark.read_text().count("started") if mark.exists() else 0


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout}s")
        time.sleep(0.05)


def one_worker_run(tmp_path: Path, env: dict[str, str], mark: Path, index: int) -> str:
    """Start a worker, wait for the handler to start, SIGTERM it and wait for the exit; its log."""
    before = started_count(mark)
    log = tmp_path / f"worker{index}.log"
    with open(log, "wb") as handle:
        worker = subprocess.Popen(
            [sys.executable, "-m", "soniq", "worker", "--jobs-modules", "forever_jobs"],
            cwd=tmp_path,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: started_count(mark) > before, 30, f"the handler did not start in worker {index}")
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    text = log.read_text(encoding="utf-8", errors="replace")
    assert code == 0, text
    return text


def read_row(url: str, options: dict[str, Any], job_id: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        app = Soniq(url, backend_options=options, observers="")
        try:
            row = await app.get_job(job_id)
        finally:
            await app.close()
        assert row is not None
        return row

    return asyncio.run(read())


def enqueue(url: str, options: dict[str, Any]) -> str:
    async def put() -> str:
        app = Soniq(url, backend_options=options, observers="")
        try:
            return await app.enqueue(TaskRef("forever"))
        finally:
            await app.close()

    return asyncio.run(put())


def drop(url: str, options: dict[str, Any]) -> None:
    async def go() -> None:
        app = Soniq(url, backend_options=options, observers="")
        try:
            backend: Any = await app.connected_backend()
            await backend.drop_schema()
        finally:
            await app.close()

    asyncio.run(go())


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_handler_cut_off_by_every_shutdown_is_dead_lettered_at_the_nack_limit(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    if kind == "sqlite":
        url, options, namespace = f"sqlite:///{tmp_path / 'queue.db'}", {}, ""
    else:
        url = request.getfixturevalue("postgres_url")
        namespace = f"t_{uuid.uuid4().hex[:12]}"
        options = {"namespace": namespace}
    (tmp_path / "forever_jobs.py").write_text(JOBS, encoding="utf-8")
    mark = tmp_path / "started"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env.update(
        FOREVER_URL=url,
        FOREVER_NS=namespace,
        FOREVER_MARK=str(mark),
        SONIQ_OBSERVERS="",
        SONIQ_POLL_INTERVAL="0.05",
        SONIQ_SHUTDOWN_TIMEOUT="0.5",
        SONIQ_MAX_SHUTDOWN_NACKS="2",
        PYTHONUNBUFFERED="1",
    )
    job_id = enqueue(url, options)
    try:
        for index in (1, 2):
            text = one_worker_run(tmp_path, env, mark, index)
            assert f"shutdown {index} of 2 to cut off its started handler" in text, text
            row = read_row(url, options, job_id)
            assert (row["status"], row["shutdown_nacks"], row["attempts"]) == ("queued", index, 0), row
        text = one_worker_run(tmp_path, env, mark, 3)
        row = read_row(url, options, job_id)
        assert row["status"] == "dead_letter", row
        assert row["dead_letter_reason"] == "nack_limit"
        assert row["last_error"] == (
            "handed back by 2 shutdowns after its handler started, without finishing (max_shutdown_nacks=2); "
            "set job_timeout or make the job resumable with ctx.step"
        )
        assert "moved to the dead-letter table (nack_limit)" in text, text
        assert "0 nack'd, 1 dead-lettered at the shutdown nack limit" in text, text
        assert started_count(mark) == 3
    finally:
        if kind == "postgres":
            drop(url, options)
