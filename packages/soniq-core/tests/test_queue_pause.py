"""Pausing and resuming queues: the API on real stores, a real worker that honours the pause while it
runs other queues' jobs, the pause outliving its app and process, and ``soniq queue`` / ``soniq inspect``."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from cli_process import run_soniq, succeeded

from soniq import Soniq
from soniq.backend import VersionedJobs, has_role
from soniq.errors import JobOptionsError, MissingBackendRoleError
from soniq.params import RegisterWorkerParams
from soniq.records import WorkerInfo

from .conftest import _wait_until

WORKER_LOG = "soniq.worker"


@pytest_asyncio.fixture
async def app(store: tuple[str, str, dict[str, Any]], fast_settings: dict[str, Any]) -> AsyncIterator[Soniq]:
    """An app on one real store per parameter (memory, SQLite, PostgreSQL in a schema of its own)."""
    kind, url, options = store
    app = Soniq(url, backend_options=options, **fast_settings)
    yield app
    if kind == "postgres":
        backend: Any = await app.connected_backend()
        await backend.drop_schema()
    await app.close()


async def status_of(app: Soniq, job_id: str) -> str | None:
    row = await app.get_job(job_id)
    return None if row is None else str(row["status"])


async def done(app: Soniq, job_id: str) -> bool:
    return await status_of(app, job_id) == "done"


class Running:
    """A worker of `app` running in this loop until `stop`."""

    def __init__(self, app: Soniq, **kwargs: Any) -> None:
        self.worker = app.worker(install_signal_handlers=False, **kwargs)
        self.task = asyncio.create_task(self.worker.run())

    async def stop(self) -> None:
        self.worker.stop("test")
        await asyncio.wait_for(self.task, 20)


def logged(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(1 for record in caplog.records if record.name == WORKER_LOG and text in record.getMessage())


# -- the API ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_pause_list_and_resume(app: Soniq) -> None:
    before = datetime.now(UTC) - timedelta(seconds=5)
    assert await app.paused_queues() == []
    assert await app.pause_queue("emails", reason="provider outage") is True
    assert await app.pause_queue("reports") is True
    listed = await app.paused_queues()
    assert [row["queue"] for row in listed] == ["emails", "reports"]
    emails = listed[0]
    assert set(emails) == {"queue", "reason", "paused_at"}
    assert emails["reason"] == "provider outage"
    assert listed[1]["reason"] is None
    assert emails["paused_at"] >= before

    # Pausing again replaces the reason, keeps when it was paused, and says it was paused already.
    assert await app.pause_queue("emails", reason="still down") is False
    again = (await app.paused_queues())[0]
    assert again == {"queue": "emails", "reason": "still down", "paused_at": emails["paused_at"]}

    assert await app.resume_queue("emails") is True
    assert await app.resume_queue("emails") is False
    assert [row["queue"] for row in await app.paused_queues()] == ["reports"]
    assert await app.resume_queue("never-paused") is False


@pytest.mark.asyncio
async def test_a_paused_queue_still_takes_enqueues(app: Soniq) -> None:
    @app.job(queue="emails")
    async def send() -> None:
        return None

    await app.pause_queue("emails")
    job_id = await app.enqueue(send)
    assert await status_of(app, job_id) == "queued"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("", "must not be empty"),
        (" emails", "leading or trailing spaces"),
        ("a,b", "contains ','"),
        ("bad\x00name", "control character"),
        ("bad\ud800", "lone surrogate"),
        ("q" * 201, "over the limit"),
        (7, "must be a string"),
    ],
)
async def test_a_queue_name_no_worker_could_serve_is_refused(app: Soniq, name: Any, words: str) -> None:
    for call in (lambda: app.pause_queue(name), lambda: app.resume_queue(name)):
        with pytest.raises(JobOptionsError, match=words):
            await call()
    assert await app.paused_queues() == []


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("reason", "words"),
    [
        ("x" * 501, "reason is 501 characters, over the limit of 500"),
        ("a\x00b", "reason contains a NUL"),
        ("a\udc80b", "reason contains a lone surrogate"),
        (42, "reason must be None or a string"),
    ],
)
async def test_a_reason_a_store_cannot_keep_is_refused(app: Soniq, reason: Any, words: str) -> None:
    with pytest.raises(JobOptionsError, match=words):
        await app.pause_queue("emails", reason=reason)
    assert await app.paused_queues() == []
    assert await app.pause_queue("emails", reason="x" * 500) is True  # the limit itself is fine


@pytest.mark.asyncio
async def test_a_backend_without_the_role_refuses_naming_it(fast_settings: dict[str, Any]) -> None:
    app = Soniq("minimal://", **fast_settings)
    calls = (lambda: app.pause_queue("emails"), lambda: app.resume_queue("emails"), app.paused_queues)
    for call in calls:
        with pytest.raises(MissingBackendRoleError) as caught:
            await call()
        assert caught.value.feature == "queue pause"
        assert caught.value.role == "QueuePauseStore"
        assert "MinimalBackend" in str(caught.value)
    await app.close()


@pytest.mark.asyncio
async def test_a_worker_on_a_backend_without_the_role_runs_jobs(fast_settings: dict[str, Any]) -> None:
    app = Soniq("minimal://", **fast_settings)

    @app.job(queue="emails")
    async def send() -> str:
        return "sent"

    job_id = await app.enqueue(send)
    running = Running(app)
    try:
        await _wait_until(lambda: done(app, job_id), timeout=10)
    finally:
        await running.stop()
    await app.close()


# -- a worker ----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_worker_leaves_a_paused_queue_alone_and_claims_again_after_resume(
    app: Soniq, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=WORKER_LOG)

    @app.job(queue="emails")
    async def send(n: int) -> int:
        return n

    @app.job(queue="reports")
    async def report(n: int) -> int:
        return n

    await app.pause_queue("emails", reason="deploy")
    held = await app.enqueue(send, n=1)
    running = Running(app)  # every queue
    try:
        # Jobs of another queue, enqueued after the held one, run while it stays queued.
        first = await app.enqueue(report, n=1)
        await _wait_until(lambda: done(app, first), timeout=10)
        second = await app.enqueue(report, n=2)
        await _wait_until(lambda: done(app, second), timeout=10)
        assert await status_of(app, held) == "queued"
        assert logged(caplog, "queue emails paused (reason: deploy); not claiming from it") == 1

        assert await app.resume_queue("emails") is True
        # Seen from the worker's next read of the pauses: at most poll_interval (0.05 s) later.
        await _wait_until(lambda: done(app, held), timeout=10)
        assert logged(caplog, "queue emails resumed") == 1
        assert logged(caplog, "queue emails paused") == 1  # once per change, not once per claim
    finally:
        await running.stop()


@pytest.mark.asyncio
async def test_a_pause_reaches_a_running_worker_and_running_jobs_finish(
    app: Soniq, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.INFO, logger=WORKER_LOG)
    release = asyncio.Event()
    started = asyncio.Event()

    @app.job(queue="emails")
    async def slow() -> str:
        started.set()
        await release.wait()
        return "finished"

    @app.job(queue="emails")
    async def send(n: int) -> int:
        return n

    @app.job(queue="reports")
    async def report(n: int) -> int:
        return n

    running = Running(app)
    try:
        in_flight = await app.enqueue(slow)
        await asyncio.wait_for(started.wait(), 10)
        await app.pause_queue("emails", reason="deploy")
        await _wait_until(lambda: logged(caplog, "queue emails paused"), timeout=10)
        held = await app.enqueue(send, n=1)
        after = await app.enqueue(report, n=1)
        await _wait_until(lambda: done(app, after), timeout=10)
        assert await status_of(app, held) == "queued"
        # The job that was running when its queue was paused runs to its end.
        release.set()
        await _wait_until(lambda: done(app, in_flight), timeout=10)
        assert await status_of(app, held) == "queued"
        await app.resume_queue("emails")
        await _wait_until(lambda: done(app, held), timeout=10)
    finally:
        release.set()
        await running.stop()


@pytest.mark.asyncio
async def test_a_worker_whose_every_queue_is_paused_claims_nothing_until_resumed(
    app: Soniq, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=WORKER_LOG)

    @app.job(queue="emails")
    async def send(n: int) -> int:
        return n

    @app.job(queue="reports")
    async def report(n: int) -> int:
        return n

    await app.pause_queue("emails")
    await app.pause_queue("reports")  # paused, but this worker does not serve it: no line about it
    held = await app.enqueue(send, n=1)
    running = Running(app, queues=["emails"])
    try:
        await _wait_until(lambda: logged(caplog, "queue emails paused (reason: none given)"), timeout=10)
        assert logged(caplog, "queue reports") == 0
        assert await status_of(app, held) == "queued"
        await app.resume_queue("emails")
        await _wait_until(lambda: done(app, held), timeout=10)
        assert logged(caplog, "queue emails resumed") == 1
    finally:
        await running.stop()


@pytest.mark.asyncio
async def test_run_once_with_every_queue_paused_stops_without_claiming(app: Soniq) -> None:
    @app.job(queue="emails")
    async def send(n: int) -> int:
        return n

    await app.pause_queue("emails")
    held = await app.enqueue(send, n=1)
    await asyncio.wait_for(app.run_worker(run_once=True, queues=["emails"], install_signal_handlers=False), 20)
    assert await status_of(app, held) == "queued"


@pytest.mark.asyncio
async def test_a_failing_read_of_the_pauses_keeps_the_last_known_set(
    app: Soniq, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger=WORKER_LOG)

    @app.job(queue="emails")
    async def send(n: int) -> int:
        return n

    @app.job(queue="reports")
    async def report(n: int) -> int:
        return n

    await app.pause_queue("emails")
    held = await app.enqueue(send, n=1)
    running = Running(app)
    try:
        await _wait_until(lambda: logged(caplog, "queue emails paused"), timeout=10)
        backend = await app.connected_backend()

        async def unreachable() -> list[Any]:
            raise ConnectionError("store down")

        monkeypatch.setattr(backend, "paused_queues", unreachable)
        await _wait_until(lambda: logged(caplog, "reading the paused queues failed"), timeout=10)
        after = await app.enqueue(report, n=1)
        await _wait_until(lambda: done(app, after), timeout=10)
        assert await status_of(app, held) == "queued"
        assert logged(caplog, "keeping the last known set (emails)") == 1
        assert logged(caplog, "queue emails resumed") == 0
    finally:
        await running.stop()


@pytest.mark.asyncio
async def test_a_worker_reports_the_job_versions_it_runs(app: Soniq) -> None:
    @app.job(queue="emails")
    async def send(n: int) -> int:
        return n

    running = Running(app)
    try:
        backend = await app.connected_backend()

        async def registered() -> Any:
            return next((w for w in await backend.list_workers() if w.id == running.worker.worker_id), None)

        record = await _wait_until(registered, timeout=10)
        expected = {app.registry.names()[0]: 1} if has_role(backend, VersionedJobs) else None
        assert record.job_versions == expected
    finally:
        await running.stop()


# -- outliving the app and the process -----------------------------------------------------------


@pytest.mark.asyncio
async def test_a_pause_outlives_its_app_and_holds_for_a_worker_started_later(
    tmp_path: Path, fast_settings: dict[str, Any]
) -> None:
    url = f"sqlite:///{tmp_path / 'durable.db'}"
    first = Soniq(url, **fast_settings)
    await first.pause_queue("emails", reason="migration")
    await first.close()

    # Another process reads it.
    listed = json.loads(succeeded(run_soniq("queue", "list", "--json", "--database-url", url, cwd=tmp_path)))
    assert [(row["queue"], row["reason"]) for row in listed] == [("emails", "migration")]

    second = Soniq(url, **fast_settings)

    @second.job(queue="emails")
    async def send(n: int) -> int:
        return n

    @second.job(queue="reports")
    async def report(n: int) -> int:
        return n

    held = await second.enqueue(send, n=1)
    running = Running(second)
    try:
        after = await second.enqueue(report, n=1)
        await _wait_until(lambda: done(second, after), timeout=10)
        assert await status_of(second, held) == "queued"
        # Resumed from another process: the running worker picks the job up.
        assert "resumed queue emails" in succeeded(
            run_soniq("queue", "resume", "emails", "--database-url", url, cwd=tmp_path)
        )
        await _wait_until(lambda: done(second, held), timeout=10)
    finally:
        await running.stop()
        await second.close()


# -- the CLI ------------------------------------------------------------------------------------


def one_error_line(result: Any) -> str:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return str(lines[0])


def test_soniq_queue_pause_list_and_resume(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"

    def soniq(*args: str) -> Any:
        return run_soniq(*args, "--database-url", url, cwd=tmp_path)

    assert succeeded(soniq("queue", "list")).strip() == "no paused queues"
    assert succeeded(soniq("queue", "pause", "emails", "--reason", "provider outage")).strip() == "paused queue emails"
    again = soniq("queue", "pause", "emails")
    assert succeeded(again).strip() == "queue emails was already paused"
    assert succeeded(soniq("queue", "pause", "reports")).strip() == "paused queue reports"

    lines = succeeded(soniq("queue", "list")).strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("emails  paused since ")
    assert lines[0].endswith("reason: provider outage")
    assert lines[1].startswith("reports  paused since ")
    assert "reason" not in lines[1]
    rows = json.loads(succeeded(soniq("queue", "list", "--json")))
    assert [(row["queue"], row["reason"]) for row in rows] == [("emails", "provider outage"), ("reports", None)]
    datetime.fromisoformat(rows[0]["paused_at"])

    inspect = succeeded(soniq("inspect"))
    assert "paused queues: emails since " in inspect
    assert "(provider outage); reports since " in inspect
    assert json.loads(succeeded(soniq("inspect", "--json")))["paused_queues"][1]["queue"] == "reports"

    assert succeeded(soniq("queue", "resume", "emails")).strip() == "resumed queue emails"
    assert succeeded(soniq("queue", "resume", "emails")).strip() == "queue emails was not paused"
    assert succeeded(soniq("queue", "resume", "reports")).strip() == "resumed queue reports"
    assert "paused queues: none" in succeeded(soniq("inspect"))


def test_soniq_queue_refuses_bad_values_and_a_backend_without_the_role(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    line = one_error_line(run_soniq("queue", "pause", "a,b", "--database-url", url, cwd=tmp_path))
    assert line.startswith("soniq: error: queue 'a,b' contains ','")
    line = one_error_line(
        run_soniq("queue", "pause", "emails", "--reason", "x" * 501, "--database-url", url, cwd=tmp_path)
    )
    assert "reason is 501 characters" in line
    line = one_error_line(run_soniq("queue", "resume", " emails", "--database-url", url, cwd=tmp_path))
    assert "leading or trailing spaces" in line
    line = one_error_line(run_soniq("queue", "list", "--database-url", "minimal://", cwd=tmp_path))
    assert "queue pause needs the backend role QueuePauseStore" in line
    # A missing name is a usage error.
    assert run_soniq("queue", "pause", "--database-url", url, cwd=tmp_path).returncode == 2
    # Without a URL, the default database is not created by a read.
    line = one_error_line(run_soniq("queue", "list", cwd=tmp_path))
    assert "does not create a database" in line
    assert not (tmp_path / "soniq.db").exists()


@pytest.mark.asyncio
async def test_soniq_inspect_shows_the_job_versions_a_worker_reports(
    tmp_path: Path, fast_settings: dict[str, Any]
) -> None:
    url = f"sqlite:///{tmp_path / 'versions.db'}"
    app = Soniq(url, **fast_settings)
    backend = await app.connected_backend()
    info = WorkerInfo(
        id="w-versions",
        hostname="host",
        pid=1,
        queues=None,
        concurrency=1,
        job_names=("billing.charge", "mail.send"),
        job_versions={"mail.send": 1, "billing.charge": 3},
    )
    await backend.register_worker(RegisterWorkerParams(worker=info))
    await app.close()
    text = succeeded(await asyncio.to_thread(run_soniq, "inspect", "--database-url", url, cwd=tmp_path))
    assert "    job versions: billing.charge v3, mail.send v1" in text
    assert "paused queues: none" in text
    shown = json.loads(
        succeeded(await asyncio.to_thread(run_soniq, "inspect", "--json", "--database-url", url, cwd=tmp_path))
    )
    assert shown["workers"][0]["job_versions"] == {"billing.charge": 3, "mail.send": 1}
    assert shown["paused_queues"] == []
