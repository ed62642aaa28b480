"""`/metrics` listens on loopback by default, and hostile queue names cannot grow it.

A real ``soniq worker --metrics-port N`` on SQLite runs one job in each of 3,000 distinct queues;
the scrape keeps 100 queue values and counts the rest under ``other``, with the number collapsed in
a series of its own. Unbounded, the same run gives tens of thousands of series and megabytes.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prom_testing import parse, series, value, wait_for

from soniq import Soniq

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(240)]

TESTS_DIR = Path(__file__).parent
JOBS = "prom_worker_jobs"
QUEUES = 3000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_worker(url: str, workdir: Path, port: int, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env.update(
        {
            "SONIQ_OBSERVERS": "prometheus",
            "SONIQ_POLL_INTERVAL": "0.1",
            "SONIQ_SHUTDOWN_TIMEOUT": "1",
            "SONIQ_PROM_TEST_URL": url,
            "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), *filter(None, [os.environ.get("PYTHONPATH")])]),
        }
    )
    log_path = workdir / "worker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "soniq", "worker", "--jobs-modules", JOBS, "--concurrency", "8"),
                *("--metrics-port", str(port), *extra),
            ],
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return proc, log_path


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def raw_scrape(host: str, port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return None


def serving_line(log_path: Path) -> str | None:
    found = re.search(r"serving /metrics on (\S+):(\d+)", log_path.read_text(errors="replace"))
    return found.group(1) if found else None


def outside_address() -> str | None:
    """An address of this machine other than loopback, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            address = str(s.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") else address


async def test_hostile_queue_names_leave_the_scrape_bounded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    app = Soniq(url)

    async def quick(n: int) -> int:
        return n

    app.job(name=f"{JOBS}.quick")(quick)
    await app.setup()
    try:
        for n in range(QUEUES):
            await app.enqueue(f"{JOBS}.quick", queue=f"hostile-{n:05d}", args={"n": n})
    finally:
        await app.close()

    port = free_port()
    proc, log_path = start_worker(url, tmp_path, port)
    try:

        def all_done() -> str | None:
            assert proc.poll() is None, log_path.read_text()
            text = raw_scrape("127.0.0.1", port)
            if text is None:
                return None
            completed = series(parse(text), "soniq_jobs_completed_total")
            return text if sum(completed.values()) >= QUEUES else None

        text = wait_for(all_done, timeout=180, what="3,000 jobs counted")
    finally:
        stop(proc)
    samples = parse(text)
    completed = series(samples, "soniq_jobs_completed_total")
    queues = {dict(labels)["queue"] for labels in completed}
    assert len(queues) == 101
    assert "other" in queues
    assert sum(completed.values()) == QUEUES
    assert value(samples, "soniq_jobs_completed_total", queue="other", job_name=f"{JOBS}.quick", status="done") == (
        QUEUES - 100
    )
    assert value(samples, "soniq_label_values_collapsed", label="queue") == QUEUES - 100
    assert value(samples, "soniq_label_values_collapsed", label="job_name") == 0
    sample_lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    print(f"scrape after {QUEUES} queues: {len(sample_lines)} samples, {len(text.encode())} bytes")
    assert len(sample_lines) < 3000, len(sample_lines)
    assert len(text.encode()) < 400_000, len(text.encode())


async def test_metrics_listen_on_loopback_unless_told_otherwise(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    app = Soniq(url)
    await app.setup()
    await app.close()
    outside = outside_address()
    for extra, host in (((), "127.0.0.1"), (("--metrics-host", "0.0.0.0"), "0.0.0.0")):
        port = free_port()
        proc, log_path = start_worker(url, tmp_path, port, *extra)
        try:
            assert wait_for(functools.partial(serving_line, log_path), timeout=30, what="the serving line") == host
            assert raw_scrape("127.0.0.1", port) is not None
            if outside is not None:
                assert (raw_scrape(outside, port) is not None) is (host == "0.0.0.0")
        finally:
            stop(proc)
