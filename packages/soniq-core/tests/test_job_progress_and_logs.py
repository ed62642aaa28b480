"""`ctx.progress` and `ctx.logger`: values refused at the call, stored coalesced, read back with
`get_job()["progress"]` and `app.get_job_logs()`, through real workers on real stores, and written
before a SIGTERMed worker hands the row back."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soniq import JobContext, ProgressValueError, Soniq, TaskRef
from soniq.errors import MissingBackendRoleError
from soniq.job_logs import encode_job_logs, log_entry, trim_job_logs
from soniq.observers import JobProgressEvent, RecordingObserver
from soniq.progress import MAX_PROGRESS_MESSAGE_CHARS, PROGRESS_INTERVAL, progress_value

stores = pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"], indirect=True)


async def drain(app: Soniq, wait_until: Callable[..., Any], job_id: str, status: str) -> dict[str, Any]:
    """Run the worker (run_once, again and again) until the job reaches `status`; return its row."""

    async def reached() -> dict[str, Any] | None:
        await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
        row = await app.get_job(job_id)
        return row if row is not None and row["status"] == status else None

    row: dict[str, Any] = await wait_until(reached, timeout=20)
    return row


# -- the values a handler may report ---------------------------------------------------------------


@given(
    done=st.one_of(st.integers(0, 10**15 - 10**6), st.floats(0, 1e15 - 1e6, allow_nan=False)),
    extra=st.one_of(st.none(), st.integers(0, 10**6)),  # done + extra stays within the 1e15 bound
    message=st.one_of(st.none(), st.text(max_size=MAX_PROGRESS_MESSAGE_CHARS).filter(lambda t: "\x00" not in t)),
)
def test_a_valid_progress_becomes_the_stored_object(done: float, extra: int | None, message: str | None) -> None:
    total = None if extra is None else done + extra
    value = progress_value(done, total, message)
    assert (value["done"], value["total"], value["message"]) == (done, total, message)
    assert datetime.fromisoformat(value["updated_at"]).tzinfo is not None
    json.dumps(value, allow_nan=False)  # storable as it is


@pytest.mark.parametrize(
    ("done", "total", "message", "words"),
    [
        (-1, None, None, "done must be from 0"),
        (math.nan, None, None, "done must be finite"),
        (math.inf, 10, None, "done must be finite"),
        (True, None, None, "done must be a number"),
        ("3", None, None, "done must be a number"),
        (5, 4, None, "above total"),
        (1, -2, None, "total must be from 0"),
        (1, 1e16, None, "total must be from 0"),
        (1, None, "x" * (MAX_PROGRESS_MESSAGE_CHARS + 1), "over the limit"),
        (1, None, "a\x00b", "NUL"),
        (1, None, "\ud800", "lone surrogate"),
        (1, None, b"bytes", "must be a string"),
    ],
)
def test_a_bad_progress_is_refused_naming_the_part(done: Any, total: Any, message: Any, words: str) -> None:
    with pytest.raises(ProgressValueError, match=words):
        progress_value(done, total, message)


# -- the log's cap ---------------------------------------------------------------------------------


messages = st.text(st.characters(codec="utf-8"), max_size=3000)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(messages, min_size=1, max_size=60), max_bytes=st.integers(1024, 8192))
def test_a_trimmed_log_fits_its_cap_keeps_the_newest_and_counts_what_it_dropped(
    texts: list[str], max_bytes: int
) -> None:
    entries = [log_entry(logging.INFO, text) for text in texts]
    trimmed = trim_job_logs(entries, max_bytes)
    assert len(encode_job_logs(trimmed).encode("utf-8")) <= max_bytes
    if trimmed == entries:
        return
    marker = trimmed[0]
    assert marker["level"] == "WARNING"
    dropped = int(marker["message"].split()[1])
    kept = trimmed[1:]
    # What is kept is the newest records in order; only the newest may be cut short when alone.
    if len(kept) == 1 and kept[0]["message"].endswith("[truncated by soniq]"):
        assert dropped == len(entries) - 1
    else:
        assert kept == entries[len(entries) - len(kept) :]
        assert dropped == len(entries) - len(kept)
    # Trimming again counts on from the marker instead of dropping it.
    again = trim_job_logs([*trimmed, *entries], max_bytes)
    assert int(again[0]["message"].split()[1]) >= dropped


def test_a_stored_record_holds_no_text_a_store_refuses() -> None:
    entry = log_entry(logging.ERROR, "nul\x00 and \ud800 surrogate")
    assert entry["message"] == "nul\\x00 and ? surrogate"
    assert entry["level"] == "ERROR"
    encode_job_logs([entry]).encode("utf-8")


# -- through real workers on real stores -----------------------------------------------------------


@stores
@pytest.mark.asyncio
async def test_progress_is_stored_coalesced_and_read_back_with_the_job(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any]
) -> None:
    recorder = RecordingObserver()
    app = make_app()
    app.add_observer(recorder)
    calls = 20_000

    @app.job(name="progress.tight_loop")
    async def tight_loop(ctx: JobContext) -> str:
        started = time.monotonic()
        for done in range(1, calls + 1):
            await ctx.progress(done, calls, message=f"row {done}")
            if done % 2000 == 0:
                await asyncio.sleep(0.05)  # the loop yields now and then, as real work does
        return f"{time.monotonic() - started:.3f}"

    job_id = await app.enqueue(tight_loop)
    row = await drain(app, wait_until, job_id, "done")
    progress = row["progress"]
    assert (progress["done"], progress["total"], progress["message"]) == (calls, calls, f"row {calls}")
    assert isinstance(progress["updated_at"], datetime)
    assert progress["updated_at"].tzinfo is not None
    stored = [event for event in recorder.events if isinstance(event, JobProgressEvent)]
    assert stored
    assert stored[-1].progress["done"] == calls
    assert stored[-1].job_id == job_id
    # Coalesced: at most one write per interval while the handler ran, plus the first and the final one.
    ran_for = float(row["result"])
    assert len(stored) <= ran_for / PROGRESS_INTERVAL + 2, (len(stored), ran_for)
    assert len(stored) < calls / 100


@stores
@pytest.mark.asyncio
async def test_a_bad_progress_fails_only_that_run_with_the_reason(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any]
) -> None:
    app = make_app()

    @app.job(name="progress.bad", max_retries=0)
    async def bad(ctx: JobContext) -> None:
        await ctx.progress(3, 2)

    @app.job(name="progress.good")
    async def good(ctx: JobContext) -> int:
        await ctx.progress(1, 1)
        return 1

    bad_id = await app.enqueue(bad)
    good_id = await app.enqueue(good)
    dead = await drain(app, wait_until, bad_id, "dead_letter")
    assert "ProgressValueError" in dead["last_error"]
    assert "above total" in dead["last_error"]
    assert (await drain(app, wait_until, good_id, "done"))["progress"]["done"] == 1


@stores
@pytest.mark.asyncio
async def test_logs_from_async_and_thread_handlers_append_across_retries(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any]
) -> None:
    app = make_app()

    @app.job(name="logs.retried", max_retries=1)
    async def retried(ctx: JobContext) -> None:
        ctx.logger.info("attempt %d starts", ctx.attempt)
        ctx.logger.debug("a debug record is not stored by default")
        if ctx.attempt == 1:
            try:
                raise ValueError("the first attempt fails")
            except ValueError:
                ctx.logger.exception("caught")
            raise RuntimeError("try again")
        ctx.logger.warning("attempt %d done", ctx.attempt)

    @app.job(name="logs.threaded")
    def threaded(ctx: JobContext) -> None:  # a plain function: runs in the sync pool's thread
        for index in range(3):
            ctx.logger.info("line %d from a thread", index)

    retried_id = await app.enqueue(retried)
    threaded_id = await app.enqueue(threaded)
    await drain(app, wait_until, retried_id, "done")
    await drain(app, wait_until, threaded_id, "done")

    logs = await app.get_job_logs(retried_id)
    assert [(r["level"], r["message"].splitlines()[0]) for r in logs] == [
        ("INFO", "attempt 1 starts"),
        ("ERROR", "caught"),
        ("INFO", "attempt 2 starts"),
        ("WARNING", "attempt 2 done"),
    ]
    assert "ValueError: the first attempt fails" in logs[1]["message"]
    assert all(isinstance(r["at"], datetime) for r in logs)
    assert logs == sorted(logs, key=lambda r: r["at"])
    assert [r["message"] for r in await app.get_job_logs(threaded_id)] == [f"line {i} from a thread" for i in range(3)]
    assert await app.get_job_logs("no-such-job") == []
    assert await app.get_job_logs("\x00") == []


@stores
@pytest.mark.asyncio
async def test_the_log_of_a_dead_lettered_job_stays_readable_and_obeys_the_cap(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any]
) -> None:
    app = make_app(job_log_max_bytes=2048)

    @app.job(name="logs.noisy", max_retries=0)
    async def noisy(ctx: JobContext) -> None:
        for index in range(200):
            ctx.logger.info("record %03d %s", index, "x" * 40)
        raise RuntimeError("gave up")

    job_id = await app.enqueue(noisy)
    await drain(app, wait_until, job_id, "dead_letter")
    logs = await app.get_job_logs(job_id)
    assert logs[0]["level"] == "WARNING"
    assert "earlier log records dropped" in logs[0]["message"]
    dropped = int(logs[0]["message"].split()[1])
    assert logs[-1]["message"].startswith("record 199")
    assert dropped + len(logs) - 1 == 200
    stored = [{"at": r["at"].isoformat(), "level": r["level"], "message": r["message"]} for r in logs]
    assert len(encode_job_logs(stored).encode("utf-8")) <= 2048


@pytest.mark.asyncio
async def test_a_backend_without_the_roles_is_refused_naming_them() -> None:
    app = Soniq("minimal://", observers="")  # examples/minimal_backend: QueueStore only
    try:
        with pytest.raises(MissingBackendRoleError, match="JobLogStore"):
            await app.get_job_logs("x")
    finally:
        await app.close()


def test_a_hand_made_context_keeps_progress_and_logs_in_memory() -> None:
    async def run() -> None:
        ctx = JobContext(job_id="j1", job_name="n", attempt=1, max_attempts=1, queue="q")
        await ctx.progress(2, 4, "half")
        ctx.logger.info("hello %s", "there")
        reports = ctx._reports
        assert reports is not None
        progress = reports.progress().value
        assert progress is not None
        assert (progress["done"], progress["total"]) == (2, 4)
        assert [r["message"] for r in reports.log_records] == ["hello there"]

    asyncio.run(run())


# -- a real worker process and a real SIGTERM ------------------------------------------------------

JOBS = """
import asyncio, os
from soniq import JobContext, Soniq

app = Soniq(os.environ["REPORT_URL"])


@app.job(name="reporting.long", max_retries=3)
async def long(ctx: JobContext) -> None:
    ctx.logger.info("run %d begins", ctx.attempt)
    await ctx.progress(3, 10, message="three of ten")
    with open(os.environ["REPORT_MARK"], "a") as mark:
        mark.write("started\\n")
    await asyncio.sleep(3600)
"""


def test_a_sigtermed_worker_stores_progress_and_logs_before_it_hands_the_job_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    (tmp_path / "reporting_jobs.py").write_text(JOBS, encoding="utf-8")
    mark = tmp_path / "started"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env.update(
        REPORT_URL=url,
        REPORT_MARK=str(mark),
        SONIQ_OBSERVERS="",
        SONIQ_POLL_INTERVAL="0.05",
        SONIQ_SHUTDOWN_TIMEOUT="0.5",
        PYTHONUNBUFFERED="1",
    )

    async def enqueue() -> str:
        async with Soniq(url, observers="") as app:
            return await app.enqueue(TaskRef("reporting.long"))

    job_id = asyncio.run(enqueue())
    log = tmp_path / "worker.log"
    with open(log, "wb") as handle:
        worker = subprocess.Popen(
            [sys.executable, "-m", "soniq", "worker", "--jobs-modules", "reporting_jobs"],
            cwd=tmp_path,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while not (mark.exists() and "started" in mark.read_text()):
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the handler did not start within 30s"
            time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)

    async def read() -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        async with Soniq(url, observers="") as app:
            return await app.get_job(job_id), await app.get_job_logs(job_id)

    row, logs = asyncio.run(read())
    assert row is not None
    assert (row["status"], row["attempts"]) == ("queued", 0)  # handed back by the shutdown, attempt kept
    assert (row["progress"]["done"], row["progress"]["total"], row["progress"]["message"]) == (3, 10, "three of ten")
    assert [r["message"] for r in logs] == ["run 1 begins"]
