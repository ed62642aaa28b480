"""The `soniq` command: one-line errors, never tracebacks, and the commands' output."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_process import run_soniq

soniq = run_soniq


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("soniq: error:")]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture
def jobs_module(tmp_path: Path) -> Path:
    (tmp_path / "myjobs.py").write_text(
        "import os\nfrom soniq import Soniq\n"
        "app = Soniq(os.environ.get('MYJOBS_URL', 'sqlite:///jobs.db'))\n"
        "@app.job(name='hello')\nasync def hello(name: str) -> str:\n    return 'hello ' + name\n"
    )
    (tmp_path / "broken.py").write_text("raise RuntimeError('this module is broken')\n")
    return tmp_path


def test_bad_url_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error(soniq("status", "--database-url", "not a url", cwd=tmp_path), "database_url")


def test_unknown_scheme_is_one_line_with_what_to_install(tmp_path: Path) -> None:
    assert_one_line_error(
        soniq("status", "--database-url", "mysql://h/db", cwd=tmp_path), "'mysql'", "installed schemes", "sqlite"
    )


def test_a_jobs_module_that_fails_to_import_is_one_line(jobs_module: Path) -> None:
    assert_one_line_error(
        soniq("worker", "--jobs-modules", "broken", cwd=jobs_module), "broken", "RuntimeError: this module is broken"
    )
    assert_one_line_error(soniq("worker", "--jobs-modules", "missing_mod", cwd=jobs_module), "missing_mod")


def test_unknown_task_at_enqueue_is_one_line(jobs_module: Path) -> None:
    assert_one_line_error(
        soniq("enqueue", "nope", "--jobs-modules", "myjobs", cwd=jobs_module), "'nope'", "registered jobs: hello"
    )


def test_arguments_that_are_not_json_are_one_line(jobs_module: Path) -> None:
    assert_one_line_error(
        soniq("enqueue", "hello", "--args", "{name: x}", "--jobs-modules", "myjobs", cwd=jobs_module), "not valid JSON"
    )


def test_enqueue_then_run_once_on_the_sqlite_default(jobs_module: Path) -> None:
    assert soniq("setup", "--jobs-modules", "myjobs", cwd=jobs_module).returncode == 0
    made = soniq("enqueue", "hello", "--args", '{"name": "world"}', "--jobs-modules", "myjobs", cwd=jobs_module)
    assert made.returncode == 0, made.stderr
    job_id = made.stdout.strip()
    ran = soniq("worker", "--run-once", "--jobs-modules", "myjobs", cwd=jobs_module)
    assert ran.returncode == 0, ran.stderr
    assert (jobs_module / "jobs.db").exists()
    status = soniq("status", "--json", "--jobs-modules", "myjobs", cwd=jobs_module)
    payload = json.loads(status.stdout)
    assert payload["stats"] == {"total": 1, "queued": 0, "processing": 0, "done": 1, "dead_letter": 0, "cancelled": 0}
    assert [w["status"] for w in payload["workers"]] == ["stopped"]
    assert job_id


def test_status_counts_jobs_scheduled_for_later_apart_from_due_ones(jobs_module: Path) -> None:
    assert soniq("setup", "--jobs-modules", "myjobs", cwd=jobs_module).returncode == 0
    for delay in ([], ["--delay", "3600"], ["--delay", "7200"]):
        made = soniq("enqueue", "hello", "--args", '{"name": "x"}', *delay, "--jobs-modules", "myjobs", cwd=jobs_module)
        assert made.returncode == 0, made.stderr

    text = soniq("status", "--jobs-modules", "myjobs", cwd=jobs_module)
    assert text.returncode == 0, text.stderr
    assert "      queued  3 (1 due now, 2 scheduled for later)" in text.stdout.splitlines()
    payload = json.loads(soniq("status", "--json", "--jobs-modules", "myjobs", cwd=jobs_module).stdout)
    assert (payload["stats"]["queued"], payload["scheduled_later"]) == (3, 2)


def test_worker_uses_the_url_of_the_app_its_jobs_are_registered_on(jobs_module: Path) -> None:
    env = {"MYJOBS_URL": f"sqlite:///{jobs_module / 'other.db'}"}
    soniq("enqueue", "hello", "--args", '{"name": "x"}', "--jobs-modules", "myjobs", cwd=jobs_module, env=env)
    assert (jobs_module / "other.db").exists()
    assert not (jobs_module / "jobs.db").exists()
    ran = soniq("worker", "--run-once", "--jobs-modules", "myjobs", cwd=jobs_module, env=env)
    assert ran.returncode == 0
    assert "1 rows handled" in ran.stderr


def test_backends_lists_distributions_and_versions(tmp_path: Path) -> None:
    out = soniq("backends", cwd=tmp_path).stdout
    assert "sqlite" in out
    assert "soniq-sqlite 0.2.0" in out
    assert "memory" in out
    assert "soniq-memory" in out


def test_dead_letter_commands(jobs_module: Path) -> None:
    result = soniq("dead-letter", "list", "--jobs-modules", "myjobs", cwd=jobs_module)
    assert result.returncode == 0
    assert "no dead-letter jobs" in result.stdout
    assert_one_line_error(soniq("dead-letter", "replay", "abc", "--jobs-modules", "myjobs", cwd=jobs_module), "abc")
    assert_one_line_error(soniq("dead-letter", "purge", "abc", "--jobs-modules", "myjobs", cwd=jobs_module), "abc")


def test_recover_reports_the_sweep(tmp_path: Path) -> None:
    assert soniq("setup", cwd=tmp_path).returncode == 0
    result = soniq("recover", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "requeued 0 rows" in result.stdout


def test_printed_urls_never_show_the_password() -> None:
    from soniq.cli import redact_url

    assert redact_url("postgresql://app:s3cret@db:5432/app") == "postgresql://app:***@db:5432/app"
    assert redact_url("sqlite:///soniq.db") == "sqlite:///soniq.db"


def test_a_bad_metrics_port_is_one_line_naming_the_setting(jobs_module: Path) -> None:
    assert_one_line_error(
        soniq("worker", "--jobs-modules", "myjobs", "--metrics-port", "99999", cwd=jobs_module),
        "metrics_port",
        "SONIQ_METRICS_PORT",
    )
