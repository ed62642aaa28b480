"""``soniq logs ID``: a job's progress and stored log records, escaped for a terminal, as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

JOBS = """
import os
from soniq import JobContext, Soniq

app = Soniq(os.environ.get("JOBS_URL", "sqlite:///jobs.db"))


@app.job(name="chatty", max_retries=0)
async def chatty(ctx: JobContext) -> None:
    await ctx.progress(2, 5, message="\\x1b[31mtwo\\x1b[0m of five")
    ctx.logger.info("hello \\x1b]0;pwned\\x07 terminal")
    try:
        raise ValueError("first line\\nsecond line")
    except ValueError:
        ctx.logger.exception("it broke")
"""


def soniq(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env["SONIQ_OBSERVERS"] = ""
    return subprocess.run(
        [sys.executable, "-m", "soniq", *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=env
    )


@pytest.fixture
def ran(tmp_path: Path) -> tuple[Path, str]:
    """A jobs module whose job was run by a real `soniq worker --run-once`, and the job's id."""
    (tmp_path / "chatty_jobs.py").write_text(JOBS, encoding="utf-8")
    enqueued = soniq("enqueue", "chatty", "--jobs-modules", "chatty_jobs", cwd=tmp_path)
    assert enqueued.returncode == 0, enqueued
    worker = soniq("worker", "--run-once", "--jobs-modules", "chatty_jobs", cwd=tmp_path)
    assert worker.returncode == 0, worker
    return tmp_path, enqueued.stdout.strip()


def test_logs_prints_progress_and_every_record_escaped(ran: tuple[Path, str]) -> None:
    cwd, job_id = ran
    result = soniq("logs", job_id, "--jobs-modules", "chatty_jobs", cwd=cwd)
    assert result.returncode == 0, result
    assert "\x1b" not in result.stdout
    assert "\x07" not in result.stdout
    lines = result.stdout.splitlines()
    assert lines[0] == "progress: 2 of 5  \\x1b[31mtwo\\x1b[0m of five"
    assert lines[1].endswith("INFO     hello \\x1b]0;pwned\\x07 terminal")
    assert lines[2].endswith("ERROR    it broke")
    assert lines[3] == "    Traceback (most recent call last):"
    assert "    ValueError: first line" in lines
    assert "    second line" in lines


def test_logs_json_has_the_records_and_the_progress(ran: tuple[Path, str]) -> None:
    cwd, job_id = ran
    result = soniq("logs", job_id, "--json", "--jobs-modules", "chatty_jobs", cwd=cwd)
    assert result.returncode == 0, result
    body = json.loads(result.stdout)
    assert body["job_id"] == job_id
    assert (body["progress"]["done"], body["progress"]["total"]) == (2, 5)
    assert [(r["level"], r["message"].splitlines()[0]) for r in body["logs"]] == [
        ("INFO", "hello \x1b]0;pwned\x07 terminal"),
        ("ERROR", "it broke"),
    ]


def test_an_unknown_id_is_one_line_and_exit_1(ran: tuple[Path, str]) -> None:
    cwd, _ = ran
    result = soniq("logs", "no-such-job", "--jobs-modules", "chatty_jobs", cwd=cwd)
    assert result.returncode == 1, result
    assert result.stderr.strip().splitlines() == ["soniq: error: no job has the id no-such-job"]


def test_without_a_url_it_refuses_rather_than_create_a_store(tmp_path: Path) -> None:
    result = soniq("logs", "x", cwd=tmp_path)
    assert result.returncode == 1, result
    assert not (tmp_path / "soniq.db").exists()
