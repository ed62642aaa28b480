"""Cancelling jobs: `app.cancel` says what happened, `app.cancel_job` keeps soniq
0.1.0's boolean, and `soniq cancel ID` does the same from a shell.

Real memory and SQLite stores; a running job is cancelled under a real worker.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from cli_process import run_soniq

from soniq import CancelOutcome, JobNotFoundError, Soniq


@pytest_asyncio.fixture(params=["memory", "sqlite"])
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Soniq]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'cancel.db'}"
    made = Soniq(url, observers="", poll_interval=0.05, heartbeat_interval=0.2, heartbeat_timeout=1.0)

    @made.job(name="quick")
    async def quick() -> str:
        return "done"

    @made.job(name="fails", max_retries=0)
    async def fails() -> None:
        raise RuntimeError("boom")

    @made.job(name="forever")
    async def forever() -> None:
        await asyncio.sleep(60)

    yield made
    await made.close()


async def status(app: Soniq, job_id: str) -> str | None:
    row = await app.get_job(job_id)
    return None if row is None else str(row["status"])


@pytest.mark.asyncio
async def test_a_queued_job_is_cancelled_at_once(app: Soniq) -> None:
    job_id = await app.enqueue("quick")
    assert await app.cancel(job_id) is CancelOutcome.CANCELLED
    assert await status(app, job_id) == "cancelled"
    other = await app.enqueue("quick")
    assert await app.cancel_job(other) is True
    assert await status(app, other) == "cancelled"


@pytest.mark.asyncio
async def test_a_finished_job_is_not_cancelled_and_the_log_says_the_cancel_lost(
    app: Soniq, caplog: pytest.LogCaptureFixture
) -> None:
    done = await app.enqueue("quick")
    dead = await app.enqueue("fails")
    await app.run_worker(run_once=True, install_signal_handlers=False)
    assert await status(app, done) == "done"
    assert await status(app, dead) == "dead_letter"
    with caplog.at_level(logging.INFO, logger="soniq"):
        assert await app.cancel(done) is CancelOutcome.ALREADY_FINISHED
        assert await app.cancel(dead) is CancelOutcome.ALREADY_FINISHED
        assert await app.cancel_job(done) is False
    assert f"cancel lost the race: job {done} already finished (done)" in caplog.text
    assert f"cancel lost the race: job {dead} already finished (dead-lettered or deleted)" in caplog.text
    assert await status(app, done) == "done"
    cancelled = await app.enqueue("quick")
    await app.cancel(cancelled)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="soniq"):
        assert await app.cancel(cancelled) is CancelOutcome.ALREADY_FINISHED
    assert f"job {cancelled} is already cancelled; nothing to do" in caplog.text
    assert "lost the race" not in caplog.text


@pytest.mark.asyncio
async def test_an_unknown_id_raises_from_cancel_and_is_false_from_cancel_job(
    app: Soniq, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(JobNotFoundError, match="cannot cancel job no-such-id: no job has that id") as caught:
        await app.cancel("no-such-id")
    assert caught.value.job_id == "no-such-id"
    with caplog.at_level(logging.WARNING, logger="soniq"):
        assert await app.cancel_job("no-such-id") is False
    assert "no job has id no-such-id" in caplog.text
    assert await app.list_jobs() == []


@pytest.mark.asyncio
async def test_a_running_async_job_is_cancelled_within_a_second(app: Soniq, wait_until: Callable[..., Any]) -> None:
    job_id = await app.enqueue("forever")
    stop = asyncio.Event()
    worker = asyncio.create_task(app.run_worker(concurrency=2, shutdown_event=stop))
    try:
        await wait_until(lambda: status(app, job_id), timeout=10)
        await wait_until(lambda: _is(app, job_id, "processing"), timeout=10)
        started = asyncio.get_running_loop().time()
        assert await app.cancel(job_id) is CancelOutcome.REQUESTED
        await wait_until(lambda: _is(app, job_id, "cancelled"), timeout=5)
        assert asyncio.get_running_loop().time() - started < 1.5
        row = await app.get_job(job_id)
        assert row is not None
        assert row["cancel_requested"] is True
        assert row["attempts"] == 0
        assert await app.cancel_job(job_id) is False  # finished now
    finally:
        stop.set()
        await asyncio.wait_for(worker, 30)


async def _is(app: Soniq, job_id: str, wanted: str) -> bool:
    return await status(app, job_id) == wanted


# -- soniq cancel ----------------------------------------------------------------------------


soniq = run_soniq


@pytest.mark.asyncio
async def test_soniq_cancel_on_a_shared_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    app = Soniq(url, observers="")

    @app.job(name="quick")
    async def quick() -> None: ...

    try:
        queued = await app.enqueue("quick")
        finished = await app.enqueue("quick")
        await app.cancel(finished)

        done = await asyncio.to_thread(soniq, "cancel", queued, "--database-url", url, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"job {queued}: cancelled (it was queued)"
        assert await status(app, queued) == "cancelled"

        again = await asyncio.to_thread(soniq, "cancel", finished, "--json", "--database-url", url, cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout) == {"job_id": finished, "outcome": "already_finished", "status": "cancelled"}

        # A second cancel of a cancelled job says so, once, and never that a cancel "lost the race".
        twice = await asyncio.to_thread(soniq, "cancel", finished, "--database-url", url, cwd=tmp_path)
        assert twice.returncode == 0, twice.stderr
        assert twice.stdout.strip() == f"job {finished}: already cancelled; nothing to do"
        assert "lost the race" not in twice.stdout + twice.stderr
        assert twice.stderr == ""

        ran = await app.enqueue("quick")
        await app.run_worker(run_once=True, install_signal_handlers=False)
        late = await asyncio.to_thread(soniq, "cancel", ran, "--database-url", url, cwd=tmp_path)
        assert late.stdout.strip() == f"job {ran}: already finished (done); nothing to cancel"

        unknown = await asyncio.to_thread(soniq, "cancel", "no-such-id", "--database-url", url, cwd=tmp_path)
        assert unknown.returncode == 1
        assert "Traceback" not in unknown.stderr
        errors = [line for line in unknown.stderr.splitlines() if line.startswith("soniq: error:")]
        assert errors == ["soniq: error: cannot cancel job no-such-id: no job has that id"]
    finally:
        await app.close()


def test_soniq_cancel_without_a_database_refuses_to_create_one(tmp_path: Path) -> None:
    result = soniq("cancel", "some-id", cwd=tmp_path)
    assert result.returncode == 1
    assert "does not create a database" in result.stderr
    assert not (tmp_path / "soniq.db").exists()
