"""The `soniq` command as an operator meets it: usage errors, bad values, what is printed, workers.

Every test runs the real command in a subprocess against a real store.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

PG_URL = os.environ.get("SONIQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SONIQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
SCRIPT = Path(sys.executable).parent / "soniq"
ESC = "\x1b"


def clean_env(env: dict[str, str] | None) -> dict[str, str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    full["SONIQ_OBSERVERS"] = ""
    full.update(env or {})
    return full


def soniq(
    *args: str, cwd: Path, env: dict[str, str] | None = None, script: bool = False
) -> subprocess.CompletedProcess[str]:
    command = [str(SCRIPT)] if script else [sys.executable, "-m", "soniq"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=clean_env(env))


def one_error_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, result
    assert "Traceback" not in result.stderr
    assert "usage:" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def wait_for(check: Callable[[], object], *, timeout: float = 30.0, what: str) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.1)


JOBS = """
import asyncio, logging, os
from soniq import Soniq

app = Soniq(os.environ.get("JOBS_URL", "sqlite:///jobs.db"))
logging.getLogger("soniq.probe").debug("soniq-debug-marker")


@app.job(name="hello")
async def hello(name: str) -> str:
    return "hello " + name


@app.job(name="paint", max_retries=0)
async def paint() -> None:
    raise RuntimeError("\\x1b[31mred\\x1b[0m and \\x07 bell")


@app.job(name="block")
async def block() -> None:
    await asyncio.Event().wait()
"""


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Path:
    (tmp_path / "myjobs.py").write_text(JOBS)
    return tmp_path


# -- usage errors, version, help ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "prefix", "fragment"),
    [
        (["worker", "--concurency", "3"], "soniq worker: error:", "did you mean --concurrency?"),
        (["dead-letter", "list", "--limt", "3"], "soniq dead-letter list: error:", "--limt"),
        (["enqueue"], "soniq enqueue: error:", "name"),
        (["status", "--log-level", "loud"], "soniq status: error:", "--log-level"),
        (["wrker"], "soniq: error:", "'wrker'"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_commands_help(
    tmp_path: Path, argv: list[str], prefix: str, fragment: str
) -> None:
    line = one_error_line(soniq(*argv, cwd=tmp_path), 2)
    command = prefix.removesuffix(": error:")
    assert line.startswith(prefix)
    assert line.endswith(f"({command} --help)")
    assert fragment in line


def test_version_names_core_and_every_installed_backend(tmp_path: Path) -> None:
    for flag in ("-V", "--version"):
        result = soniq(flag, cwd=tmp_path)
        assert result.returncode == 0
        lines = result.stdout.splitlines()
        assert lines[0] == "soniq-core 0.2.0"
        assert "soniq-sqlite 0.2.0 (sqlite)" in lines
        assert any(line.startswith("soniq-postgres 0.2.0") for line in lines)


def test_every_flag_of_every_command_has_help_text() -> None:
    from soniq.cli import build_parser

    missing: list[str] = []

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    if not any(choice.dest == name for choice in action._choices_actions):
                        missing.append(f"{parser.prog} {name}")
                    walk(child)
            elif not action.help:
                missing.append(f"{parser.prog} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser())
    assert missing == []


# -- bad values: one line, exit 1 ------------------------------------------------------------------


@pytest.mark.parametrize("delay", ["inf", "1e12", "nan", "-5"])
def test_an_impossible_delay_is_one_line(jobs_dir: Path, delay: str) -> None:
    line = one_error_line(soniq("enqueue", "hello", "--delay", delay, "--jobs-modules", "myjobs", cwd=jobs_dir), 1)
    assert line.startswith("soniq: error: --delay must be a finite number")
    assert not (jobs_dir / "jobs.db").exists()


@pytest.mark.parametrize("payload", ["[" * 5000 + "]" * 5000, '{"a": ' + "[" * 5000 + "]" * 5000 + "}"])
def test_arguments_nested_5000_deep_are_one_line(jobs_dir: Path, payload: str) -> None:
    line = one_error_line(soniq("enqueue", "hello", "--args", payload, "--jobs-modules", "myjobs", cwd=jobs_dir), 1)
    assert "nested too deeply" in line


@pytest.mark.parametrize("url", ["memory://", "sqlite:///dl.db", PG_URL, REDIS_URL])
def test_a_negative_dead_letter_limit_is_one_line_on_every_backend(tmp_path: Path, url: str) -> None:
    line = one_error_line(soniq("dead-letter", "list", "--limit", "-1", "--database-url", url, cwd=tmp_path), 1)
    assert line == "soniq: error: --limit must be at least 1, got -1"


@pytest.mark.parametrize("url", ["postgresql://app:S3cret@db:notaport/app", "redis://:S3cret@cache:notaport/0"])
def test_a_port_that_is_not_a_number_is_one_line_without_the_password(tmp_path: Path, url: str) -> None:
    line = one_error_line(soniq("status", "--database-url", url, cwd=tmp_path), 1)
    assert "the port must be a number" in line
    assert "S3cret" not in line
    assert "***" in line


def test_a_file_path_as_jobs_module_gets_the_dotted_name(jobs_dir: Path) -> None:
    line = one_error_line(soniq("worker", "--jobs-modules", "myapp/jobs.py", cwd=jobs_dir), 1)
    assert "use 'myapp.jobs' instead of 'myapp/jobs.py'" in line


def test_backend_wording_of_an_unknown_url_option_is_passed_through(tmp_path: Path) -> None:
    line = one_error_line(soniq("status", "--database-url", f"{PG_URL}?poolsize=3", cwd=tmp_path), 1)
    assert "poolsize" in line


# -- passwords ------------------------------------------------------------------------------------------


def test_passwords_never_reach_the_terminal(tmp_path: Path) -> None:
    (tmp_path / "twoapps.py").write_text(
        "from soniq import Soniq\n"
        "a = Soniq('postgresql://app:S3cret@127.0.0.1:1/a')\n"
        "b = Soniq('redis://127.0.0.1:1/0?password=S3cret')\n"
        "@a.job(name='x')\ndef x() -> None: ...\n"
        "@b.job(name='y')\ndef y() -> None: ...\n"
    )
    several = one_error_line(soniq("status", "--jobs-modules", "twoapps", cwd=tmp_path), 1)
    assert "several Soniq apps" in several
    unreachable = one_error_line(soniq("status", "--database-url", "redis://:S3cret@127.0.0.1:1/0", cwd=tmp_path), 1)
    header = soniq("status", "--database-url", PG_URL.replace("postgres@", "postgres:S3cret@", 1), cwd=tmp_path)
    assert header.returncode == 0, header.stderr
    assert "postgres:***@" in header.stdout.splitlines()[0]
    for text in (several, unreachable, header.stdout, header.stderr):
        assert "S3cret" not in text


# -- job data is escaped --------------------------------------------------------------------------------------


def test_control_characters_from_job_data_are_escaped_everywhere_they_are_printed(jobs_dir: Path) -> None:
    assert soniq("setup", "--jobs-modules", "myjobs", cwd=jobs_dir).returncode == 0
    assert soniq("enqueue", "paint", "--jobs-modules", "myjobs", cwd=jobs_dir).returncode == 0
    ran = soniq("worker", "--run-once", "--jobs-modules", "myjobs", cwd=jobs_dir)
    assert ran.returncode == 0, ran.stderr
    assert "\\x1b[31mred" in ran.stderr  # the worker's log line names the error, escaped
    listed = soniq("dead-letter", "list", "--jobs-modules", "myjobs", cwd=jobs_dir)
    assert listed.returncode == 0, listed.stderr
    assert "\\x1b[31mred\\x1b[0m and \\x07 bell" in listed.stdout
    as_json = soniq("dead-letter", "list", "--json", "--jobs-modules", "myjobs", cwd=jobs_dir)
    assert "red" in json.loads(as_json.stdout)[0]["last_error"]
    unknown = soniq("enqueue", f"{ESC}[2Jwipe", "--jobs-modules", "myjobs", cwd=jobs_dir)
    assert unknown.returncode == 1
    for text in (ran.stderr, listed.stdout, as_json.stdout, unknown.stderr):
        assert ESC not in text
        assert "\x07" not in text


# -- the working directory, the default database, logging ---------------------------------------------------------


@pytest.mark.parametrize("script", [False, True], ids=["python-m", "console-script"])
def test_a_planted_driver_in_the_working_directory_never_runs(jobs_dir: Path, script: bool) -> None:
    (jobs_dir / "aiosqlite.py").write_text("open('PLANTED_RAN', 'w').close()\nraise SystemExit(99)\n")
    result = soniq("setup", "--jobs-modules", "myjobs", cwd=jobs_dir, script=script)
    assert result.returncode == 0, result.stderr
    assert (jobs_dir / "jobs.db").exists()  # the jobs module itself was still found in the working directory
    assert not (jobs_dir / "PLANTED_RAN").exists()


@pytest.mark.parametrize("argv", [["status"], ["inspect"], ["dead-letter", "list"], ["recover"]])
def test_read_only_commands_do_not_create_the_default_database(tmp_path: Path, argv: list[str]) -> None:
    line = one_error_line(soniq(*argv, cwd=tmp_path), 1)
    assert "does not exist" in line
    assert "--database-url" in line
    # The URL may come from the app too: the error names both ways of pointing at it.
    assert "APP or --app myproject.jobs:app" in line
    assert "--jobs-modules myproject.jobs" in line
    assert list(tmp_path.iterdir()) == []
    assert soniq("setup", cwd=tmp_path).returncode == 0
    assert soniq(*argv, cwd=tmp_path).returncode == 0


def test_backends_reads_no_database(tmp_path: Path) -> None:
    assert soniq("backends", cwd=tmp_path).returncode == 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flags", [["-v"], ["--log-level", "debug"], ["--log-level", "DEBUG", "--"]])
def test_debug_logging_is_for_soniq_loggers_only(jobs_dir: Path, flags: list[str]) -> None:
    before = flags[:-1] if flags[-1] == "--" else []
    after = [] if before else flags
    result = soniq(*before, "setup", *after, "--jobs-modules", "myjobs", cwd=jobs_dir)
    assert result.returncode == 0, result.stderr
    assert "soniq-debug-marker" in result.stderr
    assert " aiosqlite:" not in result.stderr
    quiet = soniq("setup", "--jobs-modules", "myjobs", cwd=jobs_dir)
    assert "soniq-debug-marker" not in quiet.stderr


# -- workers: heartbeat age, stale?, inspect, recover --stale-after ------------------------------------------------


def test_a_killed_worker_shows_stale_and_recover_stale_after_requeues_its_job(jobs_dir: Path) -> None:
    fast = {"SONIQ_HEARTBEAT_INTERVAL": "0.2", "SONIQ_HEARTBEAT_TIMEOUT": "1"}
    assert soniq("setup", "--jobs-modules", "myjobs", cwd=jobs_dir).returncode == 0
    assert soniq("enqueue", "block", "--jobs-modules", "myjobs", cwd=jobs_dir).returncode == 0
    worker = subprocess.Popen(
        [sys.executable, "-m", "soniq", "worker", "--jobs-modules", "myjobs"],
        cwd=jobs_dir,
        env=clean_env(None),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def status() -> dict[str, object]:
            out = soniq("status", "--json", "--jobs-modules", "myjobs", cwd=jobs_dir, env=fast)
            assert out.returncode == 0, out.stderr
            payload: dict[str, object] = json.loads(out.stdout)
            return payload

        wait_for(lambda: status()["stats"]["processing"] == 1, what="the job is running")  # type: ignore[index]
        text = soniq("status", "--jobs-modules", "myjobs", cwd=jobs_dir)
        assert "1 running (0 stale?)" in text.stdout
        assert "stale? -" in text.stdout
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)

    def stale_view() -> dict[str, object] | None:
        out = soniq("inspect", "--json", "--jobs-modules", "myjobs", cwd=jobs_dir, env=fast)
        views: list[dict[str, object]] = json.loads(out.stdout)["workers"]
        return views[0] if views and views[0]["stale"] else None

    view = wait_for(stale_view, what="the killed worker shows as stale")
    assert isinstance(view, dict)
    assert view["status"] == "active"
    assert view["heartbeat_age_seconds"] > 1
    assert set(view["job_names"] or {"hello", "paint", "block"}) == {"hello", "paint", "block"}
    text = soniq("inspect", "--jobs-modules", "myjobs", cwd=jobs_dir, env=fast).stdout
    assert "stale? STALE?" in text
    assert "concurrency: 4" in text
    status_text = soniq("status", "--jobs-modules", "myjobs", cwd=jobs_dir, env=fast).stdout
    assert "1 running (1 stale?)" in status_text

    # heartbeat_timeout is still 60 s for this app: a plain sweep leaves the row; --stale-after takes it.
    assert "requeued 0 rows" in soniq("recover", "--jobs-modules", "myjobs", cwd=jobs_dir).stdout
    swept = soniq("recover", "--stale-after", "1", "--jobs-modules", "myjobs", cwd=jobs_dir)
    assert swept.returncode == 0, swept.stderr
    assert "requeued 1 rows" in swept.stdout
    assert str(view["id"]) in swept.stdout
    assert "requeued" not in swept.stderr  # the result is printed once, not logged as well
    after = soniq("status", "--json", "--jobs-modules", "myjobs", cwd=jobs_dir)
    assert json.loads(after.stdout)["stats"]["queued"] == 1


def test_recover_refuses_a_stale_after_that_is_not_a_positive_number(jobs_dir: Path) -> None:
    for value in ("0", "nan", "inf"):
        line = one_error_line(soniq("recover", "--stale-after", value, "--jobs-modules", "myjobs", cwd=jobs_dir), 1)
        assert "--stale-after" in line


# -- worker flags ---------------------------------------------------------------------------------------------


def test_a_worker_without_jobs_refuses_to_start_unless_allowed(tmp_path: Path) -> None:
    line = one_error_line(soniq("worker", "--run-once", "--database-url", "memory://", cwd=tmp_path), 1)
    assert "--jobs-modules" in line
    assert "--allow-no-jobs" in line
    allowed = soniq("worker", "--run-once", "--allow-no-jobs", "--database-url", "memory://", cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr
    assert "0 rows handled" in allowed.stderr


# -- the quick start ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_quickstart_runs_end_to_end_in_a_clean_venv_with_only_core_and_sqlite(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    venv = tmp_path / "venv"
    env = clean_env({"SONIQ_QUICKSTART_VENV": str(venv), "PYTHON": sys.executable})
    env.pop("VIRTUAL_ENV", None)
    result = subprocess.run(
        ["bash", str(root / "scripts" / "quickstart")], capture_output=True, text=True, timeout=600, env=env
    )
    assert result.returncode == 0, result.stderr
    assert "done  11" in result.stdout
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json"], capture_output=True, text=True
    )
    names = {p["name"] for p in json.loads(listed.stdout)}
    assert {"soniq-core", "soniq-sqlite", "aiosqlite"} <= names
    assert not names & {"pytest", "ruff", "mypy", "asyncpg", "redis", "soniq-postgres", "soniq-memory"}
    assert not list((root / "examples" / "quickstart").glob("soniq.db*"))
