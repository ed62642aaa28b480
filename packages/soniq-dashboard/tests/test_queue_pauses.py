"""Paused queues on the overview, the Pause and Resume buttons' writes, and the job versions on the workers
page, through HTTP against real `soniq dashboard` and `soniq worker` processes (SQLite and PostgreSQL).
The same in a browser is in test_browser.py."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest
from dash_harness import API_KEY, Dashboard, HttpClient, Store, Worker, until, wait_for

from soniq import Soniq

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


def start(processes: list[Any], store: Store, tmp_path: Path, **kwargs: Any) -> Dashboard:
    d = Dashboard(store, tmp_path, **kwargs)
    processes.append(d)
    return d


def queue_row(body: str, queue: str) -> str:
    """The overview's table row of `queue` (its HTML), or '' when it has none."""
    match = re.search(rf'<tr data-queue="{re.escape(html.escape(queue))}"[^>]*>.*?</tr>', body, re.S)
    return match.group(0) if match else ""


async def test_the_overview_shows_a_paused_queue_with_its_reason_and_a_read_only_one_offers_no_button(
    store: Store, producer: Soniq, tmp_path: Path, processes: list[Any]
) -> None:
    await producer.enqueue("dash_jobs.quick", n=1)
    await producer.pause_queue("emails", reason="provider <b>outage</b>")  # no job in it yet
    d = start(processes, store, tmp_path)
    client = HttpClient(d.base)
    status, body = client.get("/")
    assert status == 200
    emails = queue_row(body, "emails")
    assert 'data-state="paused"' in emails
    assert "PAUSED" in emails
    assert "provider &lt;b&gt;outage&lt;/b&gt;" in emails  # escaped, as every value on a page
    assert re.search(r"since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", emails)
    default = queue_row(body, "default")
    assert 'data-state="active"' in default
    assert "ACTIVE" in default
    # Read-only: no form and no button, and a post is refused.
    assert "/queues/action" not in body
    token = client.csrf()
    status, _ = client.post("/queues/action", {"resume": "emails", "csrf_token": token, "api_key": API_KEY})
    assert status == 403
    assert [row["queue"] for row in await producer.paused_queues()] == ["emails"]


async def test_pause_and_resume_through_the_write_endpoint_and_its_refusals(
    store: Store, producer: Soniq, tmp_path: Path, processes: list[Any]
) -> None:
    await producer.enqueue("dash_jobs.quick", n=1)
    d = start(processes, store, tmp_path, writes=True)
    client = HttpClient(d.base)
    status, body = client.get("/")
    assert 'action="/queues/action"' in body
    assert 'name="pause" value="default"' in queue_row(body, "default")
    token = client.csrf()
    form = {"pause": "default", "reason": "deploy 42", "csrf_token": token}

    # Without the key, with a wrong one, from another origin, or without the CSRF token: refused, nothing paused.
    assert client.post("/queues/action", form)[0] == 403
    assert client.post("/queues/action", {**form, "api_key": "wrong"})[0] == 403
    status, _ = client.post("/queues/action", {**form, "api_key": API_KEY}, headers={"Origin": "http://evil.test"})
    assert status == 403
    assert client.post("/queues/action", {"pause": "default", "api_key": API_KEY})[0] == 403
    assert await producer.paused_queues() == []

    # With them: paused, and the overview (the redirect's target) says so.
    status, body = client.post("/queues/action", {**form, "api_key": API_KEY})
    assert status == 200
    assert "paused queue default" in body
    row = queue_row(body, "default")
    assert "PAUSED" in row
    assert "deploy 42" in row
    assert 'name="resume" value="default"' in row
    paused = await producer.paused_queues()
    assert [(p["queue"], p["reason"]) for p in paused] == [("default", "deploy 42")]

    status, body = client.post("/queues/action", {**form, "api_key": API_KEY})
    assert "queue default was already paused" in body

    # A name no queue can have is refused with the reason, and nothing is written.
    status, body = client.post("/queues/action", {"pause": "a,b", "csrf_token": token, "api_key": API_KEY})
    assert status == 400
    assert "contains &#39;,&#39;" in body or "contains ','" in body
    assert client.post("/queues/action", {"csrf_token": token, "api_key": API_KEY})[0] == 400

    status, body = client.post("/queues/action", {"resume": "default", "csrf_token": token, "api_key": API_KEY})
    assert status == 200
    assert "resumed queue default" in body
    assert 'data-state="active"' in queue_row(body, "default")
    assert await producer.paused_queues() == []


async def test_a_queue_paused_from_the_dashboard_is_left_alone_by_a_running_worker(
    store: Store, producer: Soniq, tmp_path: Path, processes: list[Any]
) -> None:
    d = start(processes, store, tmp_path, writes=True)
    processes.append(Worker(store, tmp_path))
    client = HttpClient(d.base)
    token = client.csrf()
    status, _ = client.post("/queues/action", {"pause": "default", "csrf_token": token, "api_key": API_KEY})
    assert status == 200
    held = await producer.enqueue("dash_jobs.quick", n=1)
    after = await producer.enqueue("dash_jobs.quick", n=2, queue="other")

    async def is_done(job_id: str) -> bool:
        row = await producer.get_job(job_id)
        return row is not None and row["status"] == "done"

    await until(lambda: is_done(after), what="the other queue's job done")
    assert (await producer.get_job(held))["status"] == "queued"  # type: ignore[index]
    client.post("/queues/action", {"resume": "default", "csrf_token": token, "api_key": API_KEY})
    await until(lambda: is_done(held), what="the held job done after the resume")


async def test_the_workers_page_shows_the_job_versions_a_worker_runs(
    store: Store, producer: Soniq, tmp_path: Path, processes: list[Any]
) -> None:
    d = start(processes, store, tmp_path)
    processes.append(Worker(store, tmp_path))
    client = HttpClient(d.base)

    def shown() -> str | None:
        status, body = client.get("/workers")
        return body if status == 200 and "job-versions" in body else None

    body = wait_for(shown, what="a worker with its job versions on the workers page")
    assert "dash_jobs.quick v1" in body
    assert "dash_jobs.flaky v1" in body
