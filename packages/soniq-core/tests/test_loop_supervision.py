"""No internal loop of a worker dies silently.

Real `soniq worker` processes over a real SQLite store whose claim (or re-registration) raises:
the loop is logged with its traceback and restarted, and a loop that keeps failing past
`loop_failure_limit` stops the worker with an ERROR line and exit status 1.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from cli_process import run_soniq
from cli_process import succeeded as ok

pytestmark = pytest.mark.timeout(120)

JOBS = """
import os

from soniq import Soniq
from soniq.params import ClaimJobsParams, HeartbeatParams, RegisterWorkerParams
from soniq.records import JobRecord
from soniq_sqlite import SQLiteBackend


class FaultyStore(SQLiteBackend):
    \"\"\"A real SQLite store with faults: the first CLAIM_FAULTS claims raise (-1: every one), and with
    STALE_FAULT every heartbeat says the worker was declared stale and re-registering raises.\"\"\"

    claim_faults = int(os.environ.get("CLAIM_FAULTS", "0"))
    registered = 0

    async def claim_jobs(self, params: ClaimJobsParams, /) -> list[JobRecord]:
        if FaultyStore.claim_faults != 0:
            FaultyStore.claim_faults -= 1
            raise RuntimeError("injected claim fault")
        return await super().claim_jobs(params)

    async def heartbeat(self, params: HeartbeatParams, /) -> bool:
        alive = await super().heartbeat(params)
        return alive and not os.environ.get("STALE_FAULT")

    async def register_worker(self, params: RegisterWorkerParams, /) -> None:
        FaultyStore.registered += 1
        if FaultyStore.registered > 1 and os.environ.get("STALE_FAULT"):
            raise RuntimeError("injected registration fault")
        await super().register_worker(params)


app = Soniq(backend=FaultyStore("jobs.db"))


@app.job(name="ping")
async def ping(n: int) -> int:
    return n
"""


def soniq(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_soniq(*args, "--jobs-modules", "faultyjobs", cwd=cwd, env=env)


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Path:
    (tmp_path / "faultyjobs.py").write_text(JOBS)
    ok(soniq("setup", cwd=tmp_path))
    return tmp_path


def test_a_claim_loop_that_raises_is_logged_and_restarted(jobs_dir: Path) -> None:
    job_id = ok(soniq("enqueue", "ping", "--args", '{"n": 7}', cwd=jobs_dir)).strip()
    ran = soniq("worker", "--run-once", cwd=jobs_dir, env={"CLAIM_FAULTS": "3"})
    assert ran.returncode == 0, ran.stderr
    restarts = re.findall(r"ERROR soniq\.worker: worker \S+: internal loop claim failed; restarting it in", ran.stderr)
    assert len(restarts) == 3, ran.stderr
    assert ran.stderr.count("RuntimeError: injected claim fault") == 3
    assert f"job {job_id} (ping) on default: done" in ran.stderr
    assert "never retrieved" not in ran.stderr


def test_a_claim_loop_that_keeps_failing_stops_the_worker_with_status_1(jobs_dir: Path) -> None:
    # A worker that only logged the failure would run forever: the run below would time out.
    ran = soniq("worker", cwd=jobs_dir, env={"CLAIM_FAULTS": "-1", "SONIQ_LOOP_FAILURE_LIMIT": "1"})
    assert ran.returncode == 1, ran.stderr
    assert re.search(
        r"ERROR soniq\.worker: worker \S+: internal loop claim kept failing for \d+\.\ds "
        r"\(loop_failure_limit=1s\); stopping the worker",
        ran.stderr,
    ), ran.stderr
    assert re.search(r"ERROR soniq: worker \S+ exits with status 1: its internal loop claim kept failing", ran.stderr)
    assert "DRAINING -> STOPPED (drained)" in ran.stderr


def test_a_heartbeat_loop_that_raises_no_longer_dies_silently(jobs_dir: Path) -> None:
    # An unsupervised heartbeat task would die at the first failed re-registration, with nothing logged.
    env = {"STALE_FAULT": "1", "SONIQ_HEARTBEAT_INTERVAL": "0.2", "SONIQ_LOOP_FAILURE_LIMIT": "2"}
    ran = soniq("worker", cwd=jobs_dir, env=env)
    assert ran.returncode == 1, ran.stderr
    assert "internal loop heartbeat failed; restarting it in 0.1s" in ran.stderr
    assert "RuntimeError: injected registration fault" in ran.stderr
    assert re.search(r"internal loop heartbeat kept failing for \d+\.\ds \(loop_failure_limit=2s\)", ran.stderr)
    assert "exits with status 1: its internal loop heartbeat kept failing" in ran.stderr
