"""What `soniq worker` writes to its log, and what `soniq dead-letter list` prints, as real processes.

The per-job line is on by default (``--quiet-jobs`` and ``SONIQ_LOG_JOBS`` turn it off); a failure is
logged as a real traceback, from the handler's own frame, on lines of its own; a timeout is one line.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from cli_process import run_soniq
from cli_process import succeeded as ok

JOBS = """
import asyncio
from soniq import Soniq

app = Soniq("sqlite:///jobs.db")


def look_up(card: str) -> None:
    raise LookupError(f"card {card} \\x1b[31mnot found")


@app.job(name="greet", max_retries=0)
async def greet(who: str) -> str:
    return "hi " + who


@app.job(name="charge", max_retries=0)
def charge(card: str) -> None:
    look_up(card)


@app.job(name="slow", max_retries=0, timeout=0.1)
async def slow() -> None:
    await asyncio.sleep(30)
"""

CALL_LINE = JOBS.splitlines().index("    look_up(card)") + 1
"""The line of the handler's call that fails: the traceback's first frame."""
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ ")


def soniq(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_soniq(*args, "--jobs-modules", "myjobs", cwd=cwd, env=env)


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Path:
    (tmp_path / "myjobs.py").write_text(JOBS)
    ok(soniq("setup", cwd=tmp_path))
    return tmp_path


def enqueue(cwd: Path, name: str, args: str = "{}") -> str:
    return ok(soniq("enqueue", name, "--args", args, cwd=cwd)).strip()


def job_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if " soniq.jobs: " in line]


def test_the_worker_logs_one_line_per_finished_job_by_default(jobs_dir: Path) -> None:
    greeted = enqueue(jobs_dir, "greet", '{"who": "ada"}')
    charged = enqueue(jobs_dir, "charge", '{"card": "visa"}')
    ran = soniq("worker", "--run-once", cwd=jobs_dir)
    assert ran.returncode == 0, ran.stderr
    lines = job_lines(ran.stderr)
    assert len(lines) == 2, ran.stderr
    done = next(line for line in lines if greeted in line)
    assert re.search(rf"INFO soniq\.jobs: job {greeted} \(greet\) on default: done in \d+\.\d{{3}}s, run 1 of 1$", done)
    dead = next(line for line in lines if charged in line)
    assert dead.endswith("s, run 1 of 1")
    assert ": dead_letter (max_attempts) in " in dead


@pytest.mark.parametrize(
    ("flags", "env"),
    [(["--quiet-jobs"], {}), ([], {"SONIQ_LOG_JOBS": "false"})],
    ids=["--quiet-jobs", "SONIQ_LOG_JOBS=false"],
)
def test_quiet_jobs_turns_the_per_job_lines_off(jobs_dir: Path, flags: list[str], env: dict[str, str]) -> None:
    enqueue(jobs_dir, "greet", '{"who": "ada"}')
    ran = soniq("worker", "--run-once", *flags, cwd=jobs_dir, env=env)
    assert ran.returncode == 0, ran.stderr
    assert job_lines(ran.stderr) == []
    assert "DRAINING -> STOPPED" in ran.stderr


def test_both_per_job_flags_at_once_is_a_usage_error(jobs_dir: Path) -> None:
    ran = soniq("worker", "--run-once", "--quiet-jobs", "--log-jobs", cwd=jobs_dir)
    assert ran.returncode == 2
    assert "not allowed with argument" in ran.stderr


def test_a_failure_is_logged_as_a_traceback_from_the_users_frame_on_lines_of_its_own(jobs_dir: Path) -> None:
    job_id = enqueue(jobs_dir, "charge", '{"card": "visa"}')
    ran = soniq("worker", "--run-once", "--quiet-jobs", cwd=jobs_dir)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stderr.splitlines()
    at = next(i for i, line in enumerate(lines) if f"job {job_id} (charge) moved to the dead-letter table" in line)
    assert lines[at].endswith("on run 1 of 1: LookupError: card visa \\x1b[31mnot found")
    trace = lines[at + 1 : at + 7]
    assert trace[0] == "Traceback (most recent call last):"
    assert trace[1] == f'  File "{jobs_dir / "myjobs.py"}", line {CALL_LINE}, in charge'  # not executor.py
    assert trace[2].strip() == "look_up(card)"
    assert trace[3].endswith("in look_up")
    assert trace[-1] == "LookupError: card visa \\x1b[31mnot found"  # control characters escaped, per line
    assert "\x1b" not in ran.stderr
    assert "executor.py" not in ran.stderr


def test_a_timeout_is_logged_and_stored_as_one_line(jobs_dir: Path) -> None:
    job_id = enqueue(jobs_dir, "slow")
    ran = soniq("worker", "--run-once", "--quiet-jobs", cwd=jobs_dir)
    assert ran.returncode == 0, ran.stderr
    [line] = [line for line in ran.stderr.splitlines() if job_id in line]
    assert line.endswith("on run 1 of 1: TimeoutError: job timed out after 0.1s")
    assert ran.stderr.count("job timed out after 0.1s") == 1
    listed = ok(soniq("dead-letter", "list", "--traceback", cwd=jobs_dir))
    assert listed.rstrip().endswith("error=TimeoutError: job timed out after 0.1s")
    assert listed.count("timed out") == 1


def test_dead_letter_list_shows_the_summary_and_the_traceback_on_request(jobs_dir: Path) -> None:
    job_id = enqueue(jobs_dir, "charge", '{"card": "visa"}')
    ok(soniq("worker", "--run-once", "--quiet-jobs", cwd=jobs_dir))
    [line] = ok(soniq("dead-letter", "list", cwd=jobs_dir)).splitlines()
    assert line.startswith(f"{job_id}  charge  queue=default  run 1 of 1  reason=max_attempts")
    assert line.endswith("error=LookupError: card visa \\x1b[31mnot found")
    assert "\\n" not in line
    assert "Traceback" not in line
    full = ok(soniq("dead-letter", "list", "--traceback", cwd=jobs_dir)).splitlines()
    assert full[0] == line
    assert full[1:3] == [
        "    Traceback (most recent call last):",
        f'      File "{jobs_dir / "myjobs.py"}", line {CALL_LINE}, in charge',
    ]
    assert full[-1].strip() == 'raise LookupError(f"card {card} \\x1b[31mnot found")'
    assert len(full) == len(set(full))  # the summary is not repeated at the end


def test_the_start_line_says_which_speed_ups_are_in_use_and_the_budget_line_is_short(jobs_dir: Path) -> None:
    ran = soniq("worker", "--run-once", cwd=jobs_dir)
    assert ran.returncode == 0, ran.stderr
    [started] = [line for line in ran.stderr.splitlines() if " started: concurrency=" in line]
    assert started.endswith("backend=SQLiteBackend loop=uvloop json=orjson")  # both installed in this environment
    plain = soniq("worker", "--run-once", cwd=jobs_dir, env={"SONIQ_EVENT_LOOP": "asyncio"})
    assert "loop=asyncio json=orjson" in plain.stderr
    [budget] = [STAMP.sub("", line) for line in ran.stderr.splitlines() if "shutdown budget" in line]
    assert "shutdown budget 11s with async jobs" in budget
    assert len(budget) < 330  # it was 470 characters
