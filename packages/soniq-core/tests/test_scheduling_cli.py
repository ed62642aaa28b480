"""`soniq inspect` shows schedules and the leader; `soniq scheduler` and `soniq worker --no-scheduler` exist."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cli_process import run_soniq

from soniq import Soniq

soniq = run_soniq


def test_inspect_lists_schedules_flags_orphans_and_shows_the_leader(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"

    async def prepare() -> None:
        app = Soniq(url, observers="")
        await app.setup()
        await app.scheduler.add("gone.from.the.code", every=60, name="orphan")
        await app.close()

    asyncio.run(prepare())
    shown = soniq("inspect", "--json", "--database-url", url, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["leader"] is None
    (schedule,) = data["schedules"]
    assert (schedule["name"], schedule["job_name"], schedule["orphaned"]) == ("orphan", "gone.from.the.code", True)
    text = soniq("inspect", "--database-url", url, cwd=tmp_path)
    assert "leader: none" in text.stdout
    assert "ORPHANED" in text.stdout

    # A `soniq scheduler` takes the lease; inspect names it; SIGTERM releases it and exits 0.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env.update(SONIQ_OBSERVERS="", SONIQ_LEADER_LEASE_TTL="3", PYTHONUNBUFFERED="1")
    log = tmp_path / "scheduler.log"
    with open(log, "wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "soniq", "scheduler", "--database-url", url],
            cwd=tmp_path,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while "is now the leader" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        leader = json.loads(soniq("inspect", "--json", "--database-url", url, cwd=tmp_path).stdout)["leader"]
        assert leader is not None
        assert leader["holder"].startswith("scheduler-")
        assert str(process.pid) in leader["holder"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert "released the leader lease" in log.read_text()
    assert json.loads(soniq("inspect", "--json", "--database-url", url, cwd=tmp_path).stdout)["leader"] is None


def test_the_commands_and_flags_are_there(tmp_path: Path) -> None:
    assert "--no-scheduler" in soniq("worker", "--help", cwd=tmp_path).stdout
    assert "scheduler" in soniq("--help", cwd=tmp_path).stdout
    helped = soniq("scheduler", "--help", cwd=tmp_path)
    assert helped.returncode == 0
    assert "MODULES" in helped.stdout
