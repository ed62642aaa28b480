"""What a worker tells its operator: tracebacks, one line per job, shutdown budget, what a drain waits for."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from soniq import Permanent, Soniq, WorkerState
from soniq.observers import RecordingObserver

pytestmark = pytest.mark.asyncio


def messages(caplog: pytest.LogCaptureFixture, logger: str, level: int | None = None) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and (level is None or r.levelno == level)]


def load_customer(customer_id: int) -> dict[str, Any]:
    raise LookupError(f"customer {customer_id} not found")


async def test_a_failed_job_keeps_its_traceback_from_the_users_frame_on_the_row_and_in_the_log(
    fast_settings: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    app = Soniq("memory://", **fast_settings)

    @app.job(max_retries=1)
    def send_invoice(customer_id: int) -> None:
        load_customer(customer_id)

    @app.job(max_retries=0)
    async def send_reminder(customer_id: int) -> None:
        load_customer(customer_id)

    caplog.set_level(logging.INFO)
    job_id = await app.enqueue(send_invoice, customer_id=7)
    other = await app.enqueue(send_reminder, customer_id=8)
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
    for job, name, customer in ((job_id, "send_invoice", 7), (other, "send_reminder", 8)):
        row = await app.get_job(job)
        assert row is not None
        text = row["last_error"]
        lines = text.splitlines()
        # The summary, then the traceback from the handler's own frame: no frame of Soniq or asyncio.
        assert lines[0] == f"LookupError: customer {customer} not found"
        assert lines[1] == "Traceback (most recent call last):"
        assert lines[2].startswith(f'  File "{__file__}"')
        assert lines[2].endswith(f"in {name}")
        assert "load_customer(customer_id)" in text
        assert "in load_customer" in text
        assert not any(internal in text for internal in ("soniq/worker", "asyncio", "concurrent"))
        assert len(lines) == len(set(lines))  # the summary is not repeated at the end
    [retried] = [r for r in caplog.records if r.name == "soniq.worker" and job_id in r.getMessage()]
    assert retried.getMessage().endswith(": LookupError: customer 7 not found")
    assert "failed on run 1 of 2, retrying at" in retried.getMessage()
    [dead] = [r for r in caplog.records if r.name == "soniq.worker" and other in r.getMessage()]
    assert "moved to the dead-letter table (max_attempts) on run 1 of 1: LookupError" in dead.getMessage()
    for record in (retried, dead):
        # The traceback travels as the record's exc_info, from the user's frame: logged on lines of its own.
        assert record.exc_info is not None
        shown = logging.Formatter().formatException(record.exc_info)
        assert shown.splitlines()[1].startswith(f'  File "{__file__}"')
        assert "executor.py" not in shown


async def test_a_timeout_is_one_line_with_no_traceback(
    fast_settings: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    app = Soniq("memory://", **fast_settings)

    @app.job(max_retries=0, timeout=0.05)
    async def slow() -> None:
        await asyncio.sleep(30)

    caplog.set_level(logging.INFO)
    job_id = await app.enqueue(slow)
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
    dead = await app.dead_letter.get(job_id)
    assert dead is not None
    assert dead["last_error"] == "TimeoutError: job timed out after 0.05s"
    [record] = [r for r in caplog.records if r.name == "soniq.worker" and "dead-letter table" in r.getMessage()]
    assert record.exc_info is None
    assert record.getMessage().endswith("on run 1 of 1: TimeoutError: job timed out after 0.05s")


async def test_a_long_traceback_is_cut_in_the_middle_keeping_the_innermost_frames(
    fast_settings: dict[str, Any],
) -> None:
    app = Soniq("memory://", **fast_settings)

    def fail_at(depth: int) -> None:
        if depth == 0:
            raise RuntimeError("the bottom")
        try:
            fail_at(depth - 1)
        except Exception as exc:
            raise ValueError(f"layer {depth} " + "." * 200) from exc

    @app.job(max_retries=0)
    def deep() -> None:
        fail_at(60)

    job_id = await app.enqueue(deep)
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
    dead = await app.dead_letter.get(job_id)
    assert dead is not None
    text = dead["last_error"]
    assert len(text) <= 8192
    assert text.startswith("ValueError: layer 60 ...")
    assert "cut to its innermost frames" in text
    assert "raise ValueError(" in text.rsplit("cut to its innermost frames", 1)[1]
    # The innermost frame of the outermost error ends the text: its summary is the first line, not repeated.
    assert text.rstrip().endswith('raise ValueError(f"layer {depth} " + "." * 200) from exc')


async def test_permanent_dead_letters_at_once_as_non_retryable_with_its_cause(fast_settings: dict[str, Any]) -> None:
    app = Soniq("memory://", **fast_settings)

    @app.job(max_retries=5)
    def charge(card: str) -> None:
        try:
            {"valid": 1}[card]
        except KeyError as exc:
            raise Permanent(f"card {card} was rejected") from exc

    job_id = await app.enqueue(charge, card="expired")
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
    dead = await app.dead_letter.get(job_id)
    assert dead is not None
    assert (dead["dead_letter_reason"], dead["attempts"]) == ("non_retryable", 1)
    assert dead["last_error"].startswith("Permanent: card expired was rejected")
    assert "KeyError: 'expired'" in dead["last_error"]
    assert "direct cause" in dead["last_error"]


async def test_one_info_line_per_finished_job_on_soniq_jobs_by_default(
    fast_settings: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    app = Soniq("memory://", **fast_settings)

    @app.job(name="reports.build", max_retries=0)
    async def build(fail: bool) -> str:
        if fail:
            raise ValueError("no data")
        return "ok"

    caplog.set_level(logging.INFO)
    good = await app.enqueue(build, fail=False)
    bad = await app.enqueue(build, fail=True)
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
    lines = messages(caplog, "soniq.jobs", logging.INFO)
    assert len(lines) == 2
    assert any(line.startswith(f"job {good} (reports.build) on default: done in ") for line in lines)
    assert any(line.endswith("s, run 1 of 1") and good in line for line in lines)
    assert any(bad in line and ": dead_letter (max_attempts) in " in line for line in lines)


async def test_the_log_jobs_setting_turns_the_per_job_lines_off(
    fast_settings: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    app = Soniq("memory://", log_jobs=False, **fast_settings)

    @app.job(name="reports.quiet")
    async def quiet() -> None:
        return None

    caplog.set_level(logging.INFO)
    await app.enqueue(quiet)
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
    assert messages(caplog, "soniq.jobs") == []
    assert any("DRAINING -> STOPPED" in m for m in messages(caplog, "soniq.worker"))


async def test_start_says_how_long_a_shutdown_may_take_and_warns_without_job_timeout(
    fast_settings: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    app = Soniq("memory://", shutdown_timeout=8, **fast_settings)

    @app.job
    async def untimed() -> None: ...

    caplog.set_level(logging.INFO, logger="soniq.worker")
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
    info = messages(caplog, "soniq.worker", logging.INFO)
    budget = [m for m in info if "shutdown budget 11s with async jobs" in m]
    assert len(budget) == 1  # 8 s shutdown_timeout + 1 s unwind + 2 s nacks
    assert "shutdown_timeout 8s" in budget[0]
    assert "TimeoutStopSec) above 11s" in budget[0]  # async jobs only: no sync grace to add
    assert "terminationGracePeriodSeconds" in budget[0]
    assert "docs/deployment.md" in budget[0]
    assert len(budget[0]) < 320  # it was 431 characters
    warnings = messages(caplog, "soniq.worker", logging.WARNING)
    assert any("job_timeout is not set" in m and "untimed" in m for m in warnings)


async def test_a_routine_sigterm_is_info_and_a_drain_says_what_it_waits_for(
    fast_settings: dict[str, Any], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, wait_until: Any
) -> None:
    from soniq.worker import shutdown

    monkeypatch.setattr(shutdown, "DRAIN_LOG_SECONDS", 0.1)
    app = Soniq("memory://", shutdown_timeout=10, **fast_settings)
    release = asyncio.Event()
    started = asyncio.Event()

    @app.job(name="media.transcode")
    async def transcode() -> None:
        started.set()
        await release.wait()

    caplog.set_level(logging.INFO, logger="soniq.worker")
    job_id = await app.enqueue(transcode)
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    worker.stop("SIGTERM")
    await wait_until(
        lambda: len([m for m in messages(caplog, "soniq.worker") if "draining: waiting for 1 job(s)" in m]) >= 2,
        timeout=10,
    )
    waiting = [m for m in messages(caplog, "soniq.worker") if "draining: waiting for" in m]
    assert f"{job_id} (media.transcode," in waiting[0]
    release.set()
    await asyncio.wait_for(task, 10)
    received = [r for r in caplog.records if "SIGTERM received" in r.getMessage()]
    assert [r.levelno for r in received] == [logging.INFO]


async def test_cancelling_the_worker_task_goes_through_the_shutdown_states(
    fast_settings: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    observer = RecordingObserver()
    app = Soniq("memory://", shutdown_timeout=30, extra_observers=[observer], **fast_settings)
    started = asyncio.Event()

    @app.job
    async def long_running() -> None:
        started.set()
        await asyncio.Event().wait()

    caplog.set_level(logging.INFO, logger="soniq.worker")
    job_id = await app.enqueue(long_running)
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert [t.to_state for t in observer.transitions] == [
        WorkerState.DRAINING,
        WorkerState.FORCE_TIMEOUT_PATH,
        WorkerState.STOPPED,
    ]
    assert [(n.job_id, n.reason, n.written) for n in observer.nacks] == [(job_id, "cancelled", True)]
    row = await app.get_job(job_id)
    assert row is not None
    assert (row["status"], row["attempts"]) == ("queued", 0)
    backend = await app.connected_backend()
    assert [w.status.value for w in await backend.list_workers() if w.id == worker.worker_id] == ["stopped"]
    assert any("run_worker() task cancelled" in m for m in messages(caplog, "soniq.worker"))
