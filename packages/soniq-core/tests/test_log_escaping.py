"""A worker run by the library, under the application's own `logging` setup, prints
job data escaped: no escape sequence reaches the terminal, and no line break in a job's error text
starts a line of its own outside its traceback.

The error summary on ``soniq.worker`` must carry no raw ESC byte even when the application's handler,
not the CLI's (which escapes), prints it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

APP = """
import asyncio
import logging
import sys

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")

from soniq import Soniq

app = Soniq("sqlite:///jobs.db")


@app.job(name="boom", max_retries=1)
async def boom(text: str) -> None:
    raise RuntimeError(text)


@app.job(name="sync_boom", max_retries=0)
def sync_boom(text: str) -> None:
    raise ValueError(text)


async def main() -> None:
    await app.setup()
    await app.enqueue("boom", args={"text": "red \\x1b[31m\\nFORGED WARNING soniq.worker: all is well"})
    await app.enqueue("sync_boom", args={"text": "clear \\x1b[2J\\rFORGED-CR \\u202eevil"})
    await app.run_worker(run_once=True)


asyncio.run(main())
"""


def run_app(tmp_path: Path) -> str:
    (tmp_path / "app.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env.update(SONIQ_OBSERVERS="", SONIQ_RETRY_BACKOFF_BASE="0", SONIQ_RETRY_BACKOFF_MAX="0")
    ran = subprocess.run(
        [sys.executable, "app.py"],
        capture_output=True,
        timeout=90,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    stderr = ran.stderr.decode("utf-8")
    assert ran.returncode == 0, stderr
    return stderr


def test_job_data_in_library_worker_logs_is_escaped(tmp_path: Path) -> None:
    stderr = run_app(tmp_path)
    for raw in ("\x1b", "\r", "\u202e"):
        assert raw not in stderr, repr(stderr)
    retry = next(line for line in stderr.splitlines() if "(boom) failed on run 1 of 2" in line)
    assert retry.endswith(r"RuntimeError: red \x1b[31m\nFORGED WARNING soniq.worker: all is well"), retry
    dead = next(line for line in stderr.splitlines() if "(sync_boom) moved to the dead-letter table" in line)
    assert dead.endswith(r"ValueError: clear \x1b[2J\rFORGED-CR \u202eevil"), dead
    # A line break in the error text splits a line only inside its traceback, right after the exception's line.
    lines = stderr.splitlines()
    for at, line in enumerate(lines):
        if line.startswith("FORGED"):
            assert lines[at - 1] == r"RuntimeError: red \x1b[31m", lines[at - 1]
    assert stderr.count("INFO soniq.jobs: job ") == 3
