"""Which run a job is on, as the pages word it, for jobs a real `soniq worker` ran (user guide, "Runs and attempts")."""

from __future__ import annotations

import asyncio
import html
import re
from pathlib import Path
from typing import Any

import pytest
from dash_harness import Dashboard, HttpClient, Store, Worker, until

from soniq import Soniq
from soniq_dashboard.reads import run_words

pytestmark = [pytest.mark.slow]


def cell(page: str, job_id: str, css_class: str) -> str:
    """The text of the `css_class` cell in the table row of `job_id`."""
    row = re.search(rf'<tr data-job-id="{re.escape(job_id)}">(.*?)</tr>', page, re.S)
    assert row is not None, f"no row for {job_id}"
    found = re.search(rf'class="{css_class}">(.*?)</td>', row.group(1), re.S)
    assert found is not None, f"no {css_class} cell for {job_id}"
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip()


def fact(page: str) -> str:
    found = re.search(r'<dd class="runs">(.*?)</dd>', page, re.S)
    assert found is not None
    return html.unescape(found.group(1)).strip()


@pytest.mark.asyncio
async def test_each_page_says_which_run_a_job_is_on(
    store: Store, producer: Soniq, tmp_path: Path, processes: list[Any]
) -> None:
    dashboard = Dashboard(store, tmp_path)
    processes.append(dashboard)
    processes.append(Worker(store, tmp_path))
    holding = tmp_path / "holding"
    running = await producer.enqueue("dash_jobs.hold", marker=str(holding))
    done_first = await producer.enqueue("dash_jobs.quick", n=3)
    done_second = await producer.enqueue("dash_jobs.second_run", marker=str(tmp_path / "failed-once"))
    queued_again = await producer.enqueue("dash_jobs.retry_later")
    dead = await producer.enqueue("dash_jobs.always_fails")

    async def status_of(job_id: str) -> str | None:
        row = await producer.get_job(job_id)
        return None if row is None else str(row["status"])

    async def settled() -> bool:
        row = await producer.get_job(queued_again)
        return (
            holding.exists()
            and await status_of(done_first) == "done"
            and await status_of(done_second) == "done"
            and row is not None
            and row["status"] == "queued"
            and row["attempts"] == 1
            and await status_of(dead) == "dead_letter"
        )

    await until(settled, what="every job at its expected place")
    assert await status_of(running) == "processing"

    client = HttpClient(dashboard.base)
    _, jobs = await asyncio.to_thread(client.get, "/jobs")
    assert cell(jobs, running, "runs") == "run 1 of 1"
    assert cell(jobs, done_first, "runs") == "done on run 1 of 1"
    # The failed first run counts; the successful second does not, so `attempts` is 1 and the run was 2.
    assert cell(jobs, done_second, "runs") == "done on run 2 of 3"
    assert cell(jobs, done_second, "error-cell") == "from an earlier run: RuntimeError: the first run failed"
    assert cell(jobs, queued_again, "runs") == "run 2 of 4 next"
    assert cell(jobs, queued_again, "error-cell") == "RuntimeError: the first run failed"  # the first line only

    _, dead_page = await asyncio.to_thread(client.get, "/dead-letters")
    assert cell(dead_page, dead, "runs") == "ended on run 2 of 2"
    assert cell(dead_page, dead, "error-cell") == "ValueError: it <always> fails"

    for job_id, words in (
        (running, "run 1 of 1"),
        (done_first, "done on run 1 of 1"),
        (done_second, "done on run 2 of 3"),
        (queued_again, "run 2 of 4 next"),
        (dead, "ended on run 2 of 2"),
    ):
        _, page = await asyncio.to_thread(client.get, f"/jobs/{job_id}")
        assert fact(page) == words
    # The job page has the whole stored error, traceback included, escaped inside a <pre>.
    _, page = await asyncio.to_thread(client.get, f"/jobs/{dead}")
    pre = re.search(r'<pre class="code error-text">(.*?)</pre>', page, re.S)
    assert pre is not None
    assert pre.group(1).startswith("ValueError: it &lt;always&gt; fails\n")
    assert "in always_fails" in pre.group(1)
    assert "<always>" not in page
    _, page = await asyncio.to_thread(client.get, f"/jobs/{done_second}")
    assert "From an earlier run that failed; the run that finished the job succeeded." in page


def test_the_words_for_a_job_that_never_ran_and_for_cancelled_jobs() -> None:
    # A row the store moves without a run (an unknown job name, undecodable arguments) keeps attempts 0.
    assert run_words({"attempts": 0, "max_attempts": 4}, dead_letter=True) == "never ran"
    queued = {"status": "cancelled", "attempts": 1, "max_attempts": 4, "cancel_requested": False}
    assert run_words(queued) == "cancelled before run 2 of 4"
    assert run_words(queued | {"cancel_requested": True}) == "cancelled on run 2 of 4"
