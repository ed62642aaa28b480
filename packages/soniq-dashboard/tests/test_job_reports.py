"""A job's progress and log on its page: written by a real `soniq worker` process into a real store and
read through a real `soniq dashboard` process (SQLite and PostgreSQL), escaped and masked; and the page
of a backend that keeps neither. The same, live in a browser, is in test_browser.py."""

from __future__ import annotations

import dataclasses
import html
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dash_harness import Dashboard, HttpClient, Store, Worker, until
from dash_jobs import SECRET_URL

from soniq import BackendCapabilities, Soniq
from soniq_dashboard import create_dashboard_app
from soniq_dashboard.job_reports import job_log, progress_view, shown_lines
from soniq_memory import MemoryBackend

READ_KEY = "read-key-for-job-reports-0123456789"


def section(body: str, name: str) -> str:
    """The HTML of the job page's ``<section class="name">``, or '' when the page has none."""
    match = re.search(rf'<section class="{name}".*?</section>', body, re.S)
    return match.group(0) if match else ""


def log_rows(body: str) -> list[tuple[str, str, str]]:
    """(at, level, message) of each row of the page's log table, as the HTML holds them (escaped)."""
    cells = re.findall(
        r'<td data-label="at"[^>]*>(.*?)</td>\s*<td data-label="level"[^>]*>(.*?)</td>\s*'
        r'<td data-label="message"[^>]*>(.*?)</td>',
        section(body, "job-log"),
        re.S,
    )
    return [(at, level, message) for at, level, message in cells]


async def reached(producer: Soniq, job_id: str, step: int) -> bool:
    """The job's stored progress is at `step` and its stored log has that step's record."""
    job = await producer.get_job(job_id)
    progress = (job or {}).get("progress") or {}
    logs = await producer.get_job_logs(job_id)
    return progress.get("done") == step and any(r["message"].startswith(f"step {step} of") for r in logs)


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_running_jobs_progress_and_log_show_on_its_page_escaped_masked_and_guarded(
    store: Store, producer: Soniq, tmp_path: Path, processes: list[Any]
) -> None:
    # A 2 KiB log cap: the filler records overflow it, so the oldest are dropped behind a marker.
    worker = Worker(store, tmp_path, extra_env={"SONIQ_JOB_LOG_MAX_BYTES": "2048"})
    processes.append(worker)
    d = Dashboard(store, tmp_path, extra_env={"SONIQ_DASHBOARD_READ_KEY": READ_KEY})
    processes.append(d)
    client = HttpClient(d.base)
    key = {"X-Soniq-Read-Key": READ_KEY}
    gate = tmp_path / "gate"
    job_id = await producer.enqueue("dash_jobs.report", gate=str(gate), steps=2, filler=60)
    await until(lambda: reached(producer, job_id, 1), what="step 1's progress and log stored")

    status, body = client.get(f"/jobs/{job_id}", headers=key)
    assert status == 200
    assert "PROCESSING" in body
    assert "data-live-final" not in body  # a running job's page keeps polling
    progress = section(body, "job-progress")
    assert '<progress id="job-progress-bar" value="1" max="2"' in progress
    assert "1 of 2 (50%)" in progress
    assert re.search(r"updated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(\d+s ago\)", progress)
    # The message: markup as text, the terminal escape written out, the URL's password masked.
    message = re.search(r'<span class="progress-message">(.*?)</span>', progress, re.S)
    assert message is not None
    assert html.unescape(message.group(1)) == (
        "<script>alert('progress')</script> \\x1b[31mred\\x1b[0m via https://bot:***@pay.example/callback (step 1)"
    )
    assert "<script>" not in body.replace('<script src="/static/dashboard.js" defer></script>', "")
    assert "\x1b" not in body
    assert "hunter2-pw" not in body
    assert SECRET_URL not in html.unescape(body)

    rows = log_rows(body)
    # Newest last; the first row is the marker core writes for the records the cap dropped, shown as is.
    at, level, marker = rows[0]
    assert level == "WARNING"
    assert re.fullmatch(r"\[soniq\] \d+ earlier log records dropped to stay within job_log_max_bytes=2048", marker)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", at)
    assert rows[-1][1:] == ("INFO", "step 1 of 2 done")
    messages = [html.unescape(m) for _, _, m in rows]
    hostile = "<img src=x onerror=\"alert('log')\"> \\x1b[1;31mALERT\\x1b[0m calling "
    assert hostile + "https://bot:***@pay.example/callback" in messages
    # A multi-line record keeps its line breaks (the cell's CSS shows them) and its markup is text.
    assert "first line\n  second line, indented\nthird <b>line</b>" in messages
    assert "<img" not in section(body, "job-log")
    assert "<b>" not in section(body, "job-log")
    assert 'data-level="WARNING"' in section(body, "job-log")

    # The live poll's fragment carries both sections, behind the read key and the host check like every URL.
    status, fragment = client.get(f"/jobs/{job_id}?partial=live", headers=key)
    assert status == 200
    assert section(fragment, "job-progress") == progress
    assert "step 1 of 2 done" in fragment
    assert "<html" not in fragment
    status, refused = client.get(f"/jobs/{job_id}?partial=live")
    assert status == 401
    assert "step 1 of 2" not in refused
    status, refused = client.get(f"/jobs/{job_id}?partial=live", headers={**key, "Host": "rebind.attacker.example"})
    assert status == 400
    assert "step 1 of 2" not in refused

    # Step 2, then the end: the page shows both, and a finished job's page tells the script to stop polling.
    (tmp_path / "gate.1").touch()
    await until(lambda: reached(producer, job_id, 2), what="step 2's progress and log stored")
    (tmp_path / "gate.2").touch()

    async def done() -> bool:
        return ((await producer.get_job(job_id)) or {}).get("status") == "done"

    await until(done, what="the job done")
    status, body = client.get(f"/jobs/{job_id}?partial=live", headers=key)
    assert status == 200
    assert "DONE" in body
    assert "data-live-final" in body
    assert "2 of 2 (100%)" in section(body, "job-progress")
    rows = log_rows(body)
    assert [m for _, _, m in rows[-2:]] == ["step 1 of 2 done", "step 2 of 2 done"]
    assert "hunter2-pw" not in body


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_dead_lettered_jobs_page_shows_the_log_it_kept_and_no_progress(
    store: Store, producer: Soniq, tmp_path: Path, processes: list[Any]
) -> None:
    processes.append(Worker(store, tmp_path))
    d = Dashboard(store, tmp_path)
    processes.append(d)
    job_id = await producer.enqueue("dash_jobs.log_then_fail")
    await until(lambda: producer.dead_letter.get(job_id), what="the job dead-lettered")

    status, body = HttpClient(d.base).get(f"/jobs/{job_id}")
    assert status == 200
    assert "DEAD LETTER" in body
    assert "data-live-final" in body  # nothing left to change: no polling
    assert section(body, "job-progress") == ""  # a dead-letter row keeps no progress
    assert [(level, message) for _, level, message in log_rows(body)] == [
        ("ERROR", "giving up on https://bot:***@pay.example/callback")
    ]


class WithoutReports(MemoryBackend):
    """A backend that keeps neither progress nor logs."""

    @property
    def capabilities(self) -> BackendCapabilities:
        roles = {
            name: version
            for name, version in super().capabilities.roles.items()
            if name not in ("JobLogStore", "JobProgressStore")
        }
        return dataclasses.replace(super().capabilities, roles=roles)


async def asgi_get(asgi: Any, path: str) -> tuple[int, str]:
    """One GET through the ASGI app, in this event loop (the memory store lives in it)."""
    url, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": url,
        "raw_path": url.encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asgi(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(status), body.decode()


@pytest.mark.asyncio
async def test_a_backend_without_the_roles_gets_a_job_page_saying_so() -> None:
    app = Soniq("memory://", backend=WithoutReports())
    app.job(name="dash_jobs.quick")(lambda n=0: n)
    job_id = await app.enqueue("dash_jobs.quick", n=1)
    try:
        for path in (f"/jobs/{job_id}", f"/jobs/{job_id}?partial=live"):
            status, body = await asgi_get(create_dashboard_app(app), path)
            assert status == 200, path
            assert "This backend does not store job logs (it lacks the JobLogStore role)." in body
            assert "This backend does not store job progress (it lacks the JobProgressStore role)." in body
    finally:
        await app.close()


@pytest.mark.asyncio
async def test_a_full_memory_backend_shows_a_queued_jobs_empty_sections() -> None:
    app = Soniq("memory://")
    app.job(name="dash_jobs.quick")(lambda n=0: n)
    job_id = await app.enqueue("dash_jobs.quick", n=1)
    try:
        status, body = await asgi_get(create_dashboard_app(app), f"/jobs/{job_id}")
    finally:
        await app.close()
    assert status == 200
    assert "None reported yet" in section(body, "job-progress")
    assert "Nothing logged yet" in section(body, "job-log")
    assert "does not store" not in body


def test_progress_reads_as_a_count_a_share_and_an_age() -> None:
    now = datetime(2026, 1, 31, 14, 5, 9, tzinfo=UTC)
    stamp = (now - timedelta(seconds=3)).isoformat()
    view = progress_view({"done": 1, "total": 3, "message": None, "updated_at": stamp}, now)
    assert view is not None
    assert (view.words, view.bar, view.age) == ("1 of 3 (33.3%)", True, timedelta(seconds=3))
    # Rounded down: one short of done is never 100%.
    assert progress_view({"done": 9_999, "total": 10_000}, now).words == "9,999 of 10,000 (99.9%)"  # type: ignore[union-attr]
    assert progress_view({"done": 2.5, "total": 10.0}, now).words == "2.5 of 10 (25%)"  # type: ignore[union-attr]
    no_total = progress_view({"done": 1234, "total": None}, now)
    assert no_total is not None
    assert (no_total.words, no_total.bar, no_total.updated_at) == ("1,234", False, None)
    nothing_to_do = progress_view({"done": 0, "total": 0}, now)
    assert nothing_to_do is not None
    assert (nothing_to_do.words, nothing_to_do.bar) == ("0 of 0", False)
    # Not progress at all (a store handed back something else): none shown rather than a broken page.
    for stored in (None, {}, {"done": "3"}, {"done": True}, {"done": -1}, {"done": float("nan")}):
        assert progress_view(stored, now) is None  # type: ignore[arg-type]
    assert progress_view({"done": 1, "message": "\x1b[2J\r\nhttps://u:pw@h/"}, now).message == (  # type: ignore[union-attr]
        "\\x1b[2J\\r\\nhttps://u:***@h/"
    )


def test_log_messages_keep_their_line_breaks_and_lose_their_controls_and_secrets() -> None:
    assert shown_lines("a\r\n\tb\x1b[0m\u202eevil\npostgresql://app:s3cret@db/app") == (
        "a\\r\n\\tb\\x1b[0m\\u202eevil\npostgresql://app:***@db/app"
    )
    log = job_log([{"at": None, "level": "ERROR\x1b", "message": "x"}, {"at": "not a time", "level": ""}])
    assert [(line.at, line.level, line.message) for line in log.lines] == [(None, "ERROR\\x1b", "x"), (None, "", "")]
    assert log.missing_role is None
