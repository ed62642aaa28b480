"""Cross-service producers, `run_worker(shutdown_event=)`, the FastAPI lifespan, `soniq.testing`, the CLI parts."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from soniq import Soniq, UnknownJobError, WorkerState
from soniq.integrations.fastapi import lifespan
from soniq.observers import RecordingObserver
from soniq.routing import InvalidTaskNameError, TaskRef, task_ref
from soniq.testing import MemoryBackend, drain, make_app, wait_until


@pytest.mark.asyncio
async def test_strict_refuses_an_unknown_name_and_stores_nothing() -> None:
    app = make_app()
    with pytest.raises(UnknownJobError) as info:
        await app.enqueue("billing.charge", amount=1)
    assert info.value.code == "SONIQ_UNKNOWN_TASK_NAME"
    assert (await app.get_queue_stats())["total"] == 0


@pytest.mark.asyncio
async def test_warn_stores_and_logs_once_per_name(caplog: pytest.LogCaptureFixture) -> None:
    app = make_app(enqueue_validation="warn")
    first = await app.enqueue("billing.charge", amount=1)
    await app.enqueue("billing.charge", amount=2)
    row = await app.get_job(first)
    assert row is not None
    assert (row["job_name"], row["args"], row["queue"], row["max_attempts"]) == (
        "billing.charge",
        {"amount": 1},
        "default",
        4,
    )
    assert caplog.text.count("enqueueing 'billing.charge', which no job of this app registers") == 1


@pytest.mark.asyncio
async def test_none_stores_silently(caplog: pytest.LogCaptureFixture) -> None:
    app = make_app(enqueue_validation="none")
    job_id = await app.enqueue("billing.charge")
    assert await app.get_job(job_id) is not None
    assert "no job of this app registers" not in caplog.text


@pytest.mark.asyncio
async def test_a_task_ref_is_stored_even_when_strict_and_goes_to_its_queue() -> None:
    app = make_app()
    ref = task_ref(name="billing.charge", default_queue="billing")
    job_id = await app.enqueue(ref, amount=3)
    row = await app.get_job(job_id)
    assert row is not None
    assert (row["queue"], row["args"]) == ("billing", {"amount": 3})
    other = await app.enqueue(ref, queue="urgent", amount=4)
    assert (await app.get_job(other) or {})["queue"] == "urgent"
    assert ref.with_default_queue("b2").default_queue == "b2"
    assert ref.default_queue == "billing"


def test_task_ref_checks_its_name_against_the_pattern() -> None:
    with pytest.raises(InvalidTaskNameError, match="does not match task_name_pattern"):
        task_ref(name="Billing Charge", pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")
    assert TaskRef("Any Name").name == "Any Name"


@pytest.mark.asyncio
async def test_task_name_pattern_applies_at_registration_and_enqueue() -> None:
    app = make_app(task_name_pattern=r"^[a-z.]+$", enqueue_validation="none")
    with pytest.raises(InvalidTaskNameError) as info:

        @app.job(name="Bad-Name")
        def bad() -> None: ...

    assert info.value.code == "SONIQ_INVALID_TASK_NAME"
    assert "Bad-Name" not in app.registry.names()
    with pytest.raises(InvalidTaskNameError):
        await app.enqueue("Also Bad")
    assert (await app.get_queue_stats())["total"] == 0


@pytest.mark.asyncio
async def test_route_map_sends_default_queue_jobs_by_longest_prefix() -> None:
    app = make_app(route_map={"billing.": "billing", "billing.eu.": "billing-eu"})

    @app.job(name="billing.eu.charge")
    def eu() -> None: ...

    @app.job(name="billing.refund")
    def refund() -> None: ...

    @app.job(name="billing.audit", queue="audit")
    def audit() -> None: ...

    @app.job(name="reports.build")
    def build() -> None: ...

    queues = {name: app.registry.require(name).queue for name in app.registry.names()}
    assert queues == {
        "billing.eu.charge": "billing-eu",
        "billing.refund": "billing",
        "billing.audit": "audit",
        "reports.build": "default",
    }
    job_id = await app.enqueue("billing.refund")
    assert (await app.get_job(job_id) or {})["queue"] == "billing"


@pytest.mark.asyncio
async def test_setting_the_shutdown_event_drains_the_worker_without_signal_handlers() -> None:
    observer = RecordingObserver()
    app = make_app(
        shutdown_timeout=10, heartbeat_interval=0.2, heartbeat_timeout=1, poll_interval=0.05, extra_observers=[observer]
    )
    started = asyncio.Event()
    release = asyncio.Event()

    @app.job(name="slow")
    async def slow() -> str:
        started.set()
        await release.wait()
        return "finished"

    job_id = await app.enqueue("slow")
    before = signal.getsignal(signal.SIGTERM)
    stop = asyncio.Event()
    task = asyncio.create_task(app.run_worker(shutdown_event=stop))
    await asyncio.wait_for(started.wait(), 10)
    assert signal.getsignal(signal.SIGTERM) is before  # no handler installed
    stop.set()
    await wait_until(lambda: worker_state(observer) is WorkerState.DRAINING)
    release.set()
    summary = await asyncio.wait_for(task, 10)
    assert summary.states == [WorkerState.RUNNING, WorkerState.DRAINING, WorkerState.STOPPED]
    assert summary.trigger == "shutdown_event"
    row = await app.get_job(job_id)
    assert row is not None
    assert (row["status"], row["result"]) == ("done", "finished")


@pytest.mark.asyncio
async def test_the_fastapi_lifespan_runs_a_worker_and_drains_it_at_shutdown() -> None:
    observer = RecordingObserver()
    app = make_app(heartbeat_interval=0.2, heartbeat_timeout=1, poll_interval=0.05, extra_observers=[observer])

    @app.job(name="greet")
    async def greet(name: str) -> str:
        return f"hi {name}"

    async with lifespan(app, run_worker=True, concurrency=1, setup=True)(object()):
        job_id = await app.enqueue("greet", name="ann")
        await wait_until(lambda: app.get_job(job_id), timeout=10)
        row = await wait_until(_done(app, job_id), timeout=10)
        assert worker_state(observer) is WorkerState.RUNNING
    assert row["result"] == "hi ann"
    assert worker_state(observer) is WorkerState.STOPPED


def worker_state(observer: RecordingObserver) -> WorkerState:
    """The state of the app's worker, as its transitions say (it starts RUNNING)."""
    return observer.transitions[-1].to_state if observer.transitions else WorkerState.RUNNING


def _done(app: Soniq, job_id: str):  # type: ignore[no-untyped-def]
    async def check() -> dict[str, object] | None:
        row = await app.get_job(job_id)
        return row if row and row["status"] == "done" else None

    return check


@pytest.mark.asyncio
async def test_drain_runs_due_jobs_in_order_and_returns_successful_results() -> None:
    app = make_app()

    @app.job(name="add")
    async def add(a: int, b: int) -> int:
        return a + b

    @app.job(name="boom", max_retries=0)
    def boom() -> None:
        raise RuntimeError("no")

    await app.enqueue("add", a=1, b=2)
    await app.enqueue("boom")
    await app.enqueue("add", a=3, b=4)
    later = await app.enqueue("add", a=5, b=5, scheduled_at=3600)
    assert await drain(app) == [3, 7]
    assert (await app.get_job(later) or {})["status"] == "queued"  # not due: left alone
    await app.enqueue("add", a=1, b=1)
    await app.enqueue("add", a=2, b=2)
    assert await drain(app, max_jobs=1) == [2]
    assert await drain(app) == [4]
    assert await drain(app) == []
    with pytest.raises(ValueError, match="max_jobs"):
        await drain(app, max_jobs=0)


@pytest.mark.asyncio
async def test_wait_until_returns_the_value_or_fails_with_the_message() -> None:
    assert await wait_until(lambda: 5) == 5

    async def never() -> bool:
        return False

    with pytest.raises(AssertionError, match="still not there"):
        await wait_until(never, timeout=0.05, message="still not there")


def test_memory_backend_is_the_memory_distribution_s() -> None:
    app = make_app()
    assert isinstance(app.backend, MemoryBackend)


def test_the_pytest_plugin_gives_an_app_with_the_marked_jobs(tmp_path: Path) -> None:
    (tmp_path / "userjobs.py").write_text(
        "from soniq import Soniq\napp = Soniq('sqlite:///never-used.db')\n"
        "@app.job(name='double')\nasync def double(x: int) -> int:\n    return 2 * x\n"
    )
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import asyncio
            import pytest
            import userjobs
            from soniq.testing import drain

            @pytest.mark.soniq(app="userjobs:app")
            def test_runs_my_job(soniq_app):
                async def body():
                    await userjobs.app.enqueue("double", x=21)  # lands in the fixture's store
                    return await drain(soniq_app)
                assert asyncio.run(body()) == [42]

            def test_memory(soniq_memory):
                assert soniq_memory.settings.resolved_database_url == "memory://"
            """
        )
    )
    env = {**os.environ, "SONIQ_OBSERVERS": "", "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "soniq.testing.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "test_user.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    assert not (tmp_path / "never-used.db").exists()


def _soniq(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env["SONIQ_OBSERVERS"] = ""
    return subprocess.run(
        [sys.executable, "-m", "soniq", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=env,
        check=False,
    )


def test_migrate_status_reports_pending_then_applied_steps_with_the_app_by_path(tmp_path: Path) -> None:
    (tmp_path / "proj.py").write_text(
        "from soniq import Soniq\napp = Soniq('sqlite:///proj.db')\n@app.job(name='x')\ndef x() -> None: ...\n"
    )
    before = _soniq("migrate-status", "proj:app", "--json", "--check", cwd=tmp_path)
    assert before.returncode == 1, before.stderr
    status = json.loads(before.stdout)
    assert status["backend"] == "sqlite"
    assert status["applied"] == []
    assert status["pending"][0]["version"] == 1
    assert _soniq("setup", "--app", "proj:app", cwd=tmp_path).returncode == 0
    after = _soniq("migrate-status", "--app", "proj:app", cwd=tmp_path)
    assert after.returncode == 0, after.stderr
    assert "up to date" in after.stdout
    assert "applied    1  initial" in after.stdout


def test_the_app_path_is_checked(tmp_path: Path) -> None:
    (tmp_path / "proj.py").write_text("from soniq import Soniq\napp = Soniq('memory://')\nnot_an_app = 3\n")
    wrong = _soniq("inspect", "proj:not_an_app", cwd=tmp_path)
    assert wrong.returncode == 1
    assert "proj:not_an_app is a int, not a Soniq app" in wrong.stderr
    missing = _soniq("status", "--app", "proj:nope", cwd=tmp_path)
    assert "module 'proj' has no attribute 'nope'" in missing.stderr
    twice = _soniq("status", "proj:app", "--app", "proj:other", cwd=tmp_path)
    assert "the app is given twice" in twice.stderr
    bad = _soniq("status", "--app", "proj", cwd=tmp_path)
    assert "module:attribute" in bad.stderr


@pytest.mark.asyncio
async def test_every_row_carries_the_producer_id() -> None:
    named = make_app(producer_id="billing-api", enqueue_validation="none")
    job_id = await named.enqueue("reports.build")
    assert (await named.get_job(job_id) or {})["producer_id"] == "billing-api"
    auto = make_app(enqueue_validation="none")
    row = await auto.get_job(await auto.enqueue("reports.build")) or {}
    hostname, pid, program = str(row["producer_id"]).split(":")
    assert (int(pid), bool(hostname), bool(program)) == (os.getpid(), True, True)
