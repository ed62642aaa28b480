"""Passwords, traps for new users, and the install checks, through the public API."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import soniq
from soniq import BackendNotFoundError, InvalidURLError, JobOptionsError, Permanent, Soniq, SoniqError
from soniq.settings import Settings

SECRET_URLS = [
    "postgresql://app:S3cret@db.internal:5432/jobs",
    "redis://:S3cret@cache.internal:6379/0",
    "postgresql://db.internal/jobs?user=app&password=S3cret",
]


@pytest.mark.parametrize("url", SECRET_URLS)
def test_repr_of_the_app_and_its_settings_never_show_the_password(url: str) -> None:
    app = Soniq(url)  # resolving the backend is lazy, so no server or driver is needed here
    for text in (repr(app), repr(app.settings), str(app.settings), repr(Settings.load({"database_url": url}))):
        assert "S3cret" not in text
        assert "***" in text


def test_the_invalid_url_error_masks_the_password() -> None:
    app = Soniq("postgresql://app:S3cret@[::1/db")
    with pytest.raises(InvalidURLError) as info:
        _ = app.backend
    assert "S3cret" not in str(info.value)
    assert "app:***@" in str(info.value)


def test_soniq_without_a_url_builds_even_when_the_default_backend_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import soniq.discovery as discovery

    # A PostgreSQL-only install: the sqlite scheme of the default URL is served by nothing.
    monkeypatch.setattr(discovery, "_entry_points", lambda group: [])
    app = Soniq()

    @app.job(name="jobs.work")
    async def work() -> None: ...

    with pytest.raises(BackendNotFoundError, match=r"scheme 'sqlite'.*pip install soniq-sqlite"):
        _ = app.backend
    monkeypatch.undo()
    app.use_database_url("memory://")
    assert type(app.backend).__name__ == "MemoryBackend"


def test_use_database_url_refuses_options_the_new_backend_does_not_take() -> None:
    app = Soniq("memory://", backend_options={"namespace": "tenant_a"})
    with pytest.raises(SoniqError, match=r"backend options \(busy_timeout, namespace\) do not apply"):
        app.use_database_url("memory://", busy_timeout=5)
    assert app.backend_options == {"namespace": "tenant_a"}
    app.use_database_url("memory://", namespace="tenant_b")
    assert app.backend_options == {"namespace": "tenant_b"}


def test_a_job_defined_in_a_script_run_as_main_is_refused_without_a_name(tmp_path: Path) -> None:
    script = tmp_path / "producer.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            from soniq import Soniq
            app = Soniq("memory://")
            try:
                @app.job
                def resize(path): ...
            except ValueError as exc:
                print(exc)
            else:
                sys.exit("registered")

            @app.job(name="images.resize")
            def resize_named(path): ...
            print("named:", app.registry.names())
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "__main__.resize" in done.stdout
    assert "imports jobs by module name" in done.stdout
    assert "@app.job(name='resize')" in done.stdout
    assert "named: ['images.resize']" in done.stdout


@pytest.mark.parametrize(
    ("queue", "fragment"),
    [("", "must not be empty"), ("a,b", "contains ','"), ("x\x00", "control character"), (" q", "leading")],
)
def test_a_bad_queue_is_refused_at_registration(queue: str, fragment: str) -> None:
    app = Soniq("memory://")
    with pytest.raises(JobOptionsError, match=fragment):

        @app.job(name="work", queue=queue)
        async def work() -> None: ...

    assert app.registry.names() == []


def test_permanent_and_snooze_are_instructions_exported_beside_the_errors() -> None:
    from soniq import errors, instructions

    assert soniq.Permanent is Permanent is errors.Permanent is instructions.Permanent
    assert soniq.Snooze is errors.Snooze is instructions.Snooze
    assert not issubclass(Permanent, SoniqError)
    assert not issubclass(soniq.Snooze, SoniqError)
    assert {"Permanent", "Snooze"} <= set(soniq.__all__)


@pytest.mark.asyncio
async def test_a_done_job_says_when_its_last_error_is_from_an_earlier_attempt(fast_settings: dict[str, Any]) -> None:
    app = Soniq("memory://", **fast_settings)
    calls: list[int] = []

    @app.job(name="flaky", max_retries=2)
    async def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first try fails")

    @app.job(name="fine")
    async def fine() -> None: ...

    try:
        flaky_id = await app.enqueue("flaky")
        fine_id = await app.enqueue("fine")
        queued = await app.get_job(flaky_id)
        assert queued is not None
        assert queued["error_from_earlier_attempt"] is False
        while True:
            await app.run_worker(run_once=True, install_signal_handlers=False)
            row = await app.get_job(flaky_id)
            if row is not None and row["status"] == "done":
                break
        assert row["last_error"] is not None
        assert "first try fails" in row["last_error"]
        assert row["error_from_earlier_attempt"] is True
        clean = await app.get_job(fine_id)
        assert clean is not None
        assert (clean["status"], clean["error_from_earlier_attempt"]) == ("done", False)
        listed = {r["id"]: r for r in await app.list_jobs(status="done")}
        assert listed[flaky_id]["error_from_earlier_attempt"] is True
        assert listed[fine_id]["error_from_earlier_attempt"] is False
    finally:
        await app.close()


@pytest.mark.asyncio
async def test_listings_leave_results_out_unless_asked(fast_settings: dict[str, Any]) -> None:
    app = Soniq("memory://", **fast_settings)

    @app.job(name="answer")
    async def answer() -> dict[str, int]:
        return {"value": 42}

    try:
        job_id = await app.enqueue("answer")
        await app.run_worker(run_once=True, install_signal_handlers=False)
        [plain] = await app.list_jobs()
        [full] = await app.list_jobs(include_results=True)
        assert plain["result"] is None
        assert full["result"] == {"value": 42}
        single = await app.get_job(job_id)
        assert single is not None
        assert single["result"] == {"value": 42}
    finally:
        await app.close()


def _python_with_package_copy(tmp_path: Path, *extra_dirs: str) -> tuple[list[str], dict[str, str]]:
    """A copy of the installed `soniq` package on its own path, optionally with 0.1.0-only folders added."""
    import shutil

    site = tmp_path / "site"
    shutil.copytree(Path(soniq.__file__).parent, site / "soniq", ignore=shutil.ignore_patterns("__pycache__"))
    for name in extra_dirs:
        (site / "soniq" / name).mkdir()
        (site / "soniq" / name / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(site)}
    return [sys.executable, "-c", "import soniq; print(soniq.__file__)"], env


def test_import_refuses_a_leftover_0_1_0_file_set_and_says_what_to_run(tmp_path: Path) -> None:
    command, env = _python_with_package_copy(tmp_path, "core", "features")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: soniq 0.1.0 files are still installed")
    assert str(tmp_path / "site" / "soniq" / "core") in last
    assert "pip uninstall -y soniq soniq-core && pip install soniq==0.2.0" in last


def test_import_of_a_clean_package_is_not_affected(tmp_path: Path) -> None:
    command, env = _python_with_package_copy(tmp_path)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "site" / "soniq" / "__init__.py")


def test_a_script_that_uses_enqueue_sync_and_never_closes_the_app_exits(tmp_path: Path) -> None:
    script = tmp_path / "producer.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from soniq import Soniq
            app = Soniq("sqlite:///{tmp_path / "jobs.db"}", observers="")

            @app.job(name="jobs.ping")
            def ping(n): ...

            print(app.enqueue_sync("jobs.ping", n=1) is not None)
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
