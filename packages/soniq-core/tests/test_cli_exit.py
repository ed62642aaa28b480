"""A ``soniq worker`` process exits after SIGTERM even when a handler's task will not stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

JOBS = """
import asyncio, os
from soniq import Soniq

app = Soniq(os.environ["STUBBORN_URL"])


@app.job(name="stubborn", timeout=0.3, max_retries=0)
async def stubborn() -> None:
    with open(os.environ["STUBBORN_MARK"], "w") as mark:
        mark.write("started")
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue
"""


def wait_for_text(path: Path, text: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(encoding="utf-8", errors="replace"):
            return True
        time.sleep(0.05)
    return False


def test_a_task_that_swallows_cancellation_does_not_keep_a_stopped_worker_alive(tmp_path: Path) -> None:
    (tmp_path / "stubborn_jobs.py").write_text(JOBS, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env.update(
        STUBBORN_URL=f"sqlite:///{tmp_path / 'queue.db'}",
        STUBBORN_MARK=str(tmp_path / "started"),
        SONIQ_OBSERVERS="",
        SONIQ_POLL_INTERVAL="0.05",
        SONIQ_CANCEL_GRACE_SECONDS="0.5",
        SONIQ_SHUTDOWN_TIMEOUT="1",
        PYTHONUNBUFFERED="1",
    )
    command = [sys.executable, "-m", "soniq"]
    made = subprocess.run(
        [*command, "enqueue", "stubborn", "--jobs-modules", "stubborn_jobs"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    log = tmp_path / "worker.log"
    with open(log, "wb") as handle:
        worker = subprocess.Popen(
            [*command, "worker", "--jobs-modules", "stubborn_jobs"],
            cwd=tmp_path,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    try:
        # The worker gives up on the handler (its row is dead-lettered `stuck`); the task lives on.
        assert wait_for_text(log, "moved to the dead-letter table (stuck)", 30), log.read_text()
        signalled = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=20)
        elapsed = time.monotonic() - signalled
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    text = log.read_text(encoding="utf-8", errors="replace")
    assert code == 0, text
    # STOPPED, then at most the shutdown budget plus one cancel grace for the leftover task.
    assert elapsed < 1 + 0.5 + 5, text
    assert "DRAINING -> STOPPED" in text
    assert "did not stop within 0.5s of being cancelled at exit" in text
    assert "soniq-handler-" in text
    assert "Task was destroyed" not in text
