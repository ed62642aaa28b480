"""The FastAPI/Starlette lifespan under a real uvicorn process: Soniq's lines show, with level and logger name."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

SERVER = """
from starlette.applications import Starlette
from soniq import Soniq
from soniq.integrations.fastapi import lifespan

jobs = Soniq("sqlite:///jobs.db", poll_interval=0.05)


@jobs.job(name="greet", max_retries=0)
async def greet(who: str) -> str:
    return "hi " + who


api = Starlette(lifespan=lifespan(jobs, run_worker=True, concurrency=1, setup=True))
"""

ENQUEUE = """
import asyncio
from server import jobs

async def main() -> None:
    await jobs.setup()
    print(await jobs.enqueue("greet", who="ada"))
    await jobs.close()

asyncio.run(main())
"""

CONFIGURED = """
import logging
logging.basicConfig(level=logging.WARNING, format="APP %(levelname)s %(name)s %(message)s")
from server import api
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(cwd: Path, target: str) -> tuple[subprocess.Popen[bytes], Path]:
    """A uvicorn process serving `target`; its stderr goes to the returned file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env["SONIQ_OBSERVERS"] = ""
    command = [sys.executable, "-m", "uvicorn", target, "--port", str(free_port()), "--app-dir", str(cwd)]
    log = cwd / "stderr.log"
    with log.open("wb") as stderr:
        server = subprocess.Popen(command, cwd=cwd, env=env, stderr=stderr, stdout=subprocess.DEVNULL)
    return server, log


def read_until(server: subprocess.Popen[bytes], log: Path, text: str, *, timeout: float = 30.0) -> list[str]:
    """The server's stderr lines once one contains `text`; fails after `timeout` or if the server exits."""
    deadline = time.monotonic() + timeout
    while True:
        lines = log.read_text(errors="replace").splitlines()
        if any(text in line for line in lines):
            return lines
        if server.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no {text!r} on the server's stderr within {timeout}s:\n" + "\n".join(lines))
        time.sleep(0.05)


def stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "server.py").write_text(SERVER)
    (tmp_path / "configured.py").write_text(CONFIGURED)
    (tmp_path / "enqueue.py").write_text(ENQUEUE)
    return tmp_path


def enqueue(cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env["SONIQ_OBSERVERS"] = ""
    done = subprocess.run([sys.executable, "enqueue.py"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_under_uvicorn_soniq_info_lines_show_with_their_logger_names(app_dir: Path) -> None:
    job_id = enqueue(app_dir)
    server, log = serve(app_dir, "server:api")
    try:
        lines = read_until(server, log, f"job {job_id} (greet)")
    finally:
        stop(server)
    started = [line for line in lines if "starting an in-process Soniq worker" in line]
    assert started[0].startswith("INFO:     soniq.integrations.fastapi: starting")
    assert any(line.startswith("INFO:     soniq.worker: worker ") and " started: " in line for line in lines)
    done = [line for line in lines if f"job {job_id} (greet)" in line]
    assert done[0].startswith(f"INFO:     soniq.jobs: job {job_id} (greet) on default: done in ")
    warned = [line for line in lines if "job_timeout is not set" in line]
    assert warned[0].startswith("WARNING:  soniq.worker: worker ")  # a warning names its logger too


def test_an_application_that_configures_logging_keeps_its_own_set_up(app_dir: Path) -> None:
    enqueue(app_dir)
    server, log = serve(app_dir, "configured:api")
    try:
        lines = read_until(server, log, "job_timeout is not set")
    finally:
        stop(server)
    warned = [line for line in lines if "job_timeout is not set" in line]
    assert warned[0].startswith("APP WARNING soniq.worker worker ")
    assert not any("soniq.integrations.fastapi" in line for line in lines)  # INFO: below the app's own level
