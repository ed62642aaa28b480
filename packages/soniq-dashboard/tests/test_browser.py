"""The dashboard in real Chromium, against real `soniq dashboard` and `soniq worker` processes, SQLite and Postgres."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dash_harness import API_KEY, Dashboard, HttpClient, Store, Worker, wait_for
from dash_jobs import EVIL_ERROR, EVIL_NAME

from soniq import Soniq

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


@pytest.fixture
def processes() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for process in started:
        process.stop()


def dashboard(store: Store, tmp_path: Path, processes: list[Any], *, writes: bool = False) -> Dashboard:
    d = Dashboard(store, tmp_path, writes=writes)
    processes.append(d)
    return d


def worker(store: Store, tmp_path: Path, processes: list[Any]) -> Worker:
    w = Worker(store, tmp_path)
    processes.append(w)
    return w


async def until(check: Any, *, timeout: float = 20.0, what: str) -> Any:
    """Await `check()` until it is truthy, with a deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        await asyncio.sleep(0.05)


def in_browser(browser: Any, condition: Any, *, timeout: float = 20.0, what: str) -> Any:
    """Wait for `condition(browser)`; a live update may replace elements mid-check, so that retries."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(
        browser,
        timeout,
        poll_frequency=0.05,
        ignored_exceptions=(StaleElementReferenceException, NoSuchElementException),
    )
    return wait.until(lambda d: condition(d), message=what)


def mark_page(browser: Any) -> None:
    """A value only this page load has: it survives live updates and disappears on a reload."""
    browser.execute_script("window.__soniqSamePage = 'yes';")


def same_page(browser: Any) -> bool:
    return bool(browser.execute_script("return window.__soniqSamePage === 'yes';"))


def row_state(browser: Any, worker_id: str | None = None) -> str | None:
    from selenium.webdriver.common.by import By

    rows = browser.find_elements(By.CSS_SELECTOR, "tr[data-worker-id]")
    for row in rows:
        if worker_id is None or row.get_attribute("data-worker-id") == worker_id:
            return str(row.find_element(By.CSS_SELECTOR, ".worker-state").text)
    return None


async def test_a_job_enqueued_in_another_process_appears_without_a_reload(
    store: Store, producer: Soniq, browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from selenium.webdriver.common.by import By

    d = dashboard(store, tmp_path, processes)
    browser.get(d.base + "/jobs")
    assert "No jobs match." in browser.find_element(By.ID, "live").text
    mark_page(browser)

    job_id = await producer.enqueue("dash_jobs.quick", n=21)

    text = in_browser(
        browser, lambda b: b.find_element(By.CSS_SELECTOR, f'tr[data-job-id="{job_id}"]').text, what="row"
    )
    assert "dash_jobs.quick" in text
    assert "QUEUED" in text  # the state is a word, not only a colour
    assert same_page(browser)
    browser.get(d.base + "/")
    in_browser(browser, lambda b: b.find_element(By.CSS_SELECTOR, '[data-count="queued"]').text == "1", what="count")


async def test_the_queues_table_shows_each_queues_declared_limit(
    store: Store, producer: Soniq, browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from selenium.webdriver.common.by import By

    limits = '{"emails": {"max_concurrent": 3, "rate_limit": "10/5s"}}'
    d = Dashboard(store, tmp_path, extra_env={"SONIQ_QUEUE_LIMITS": limits})
    processes.append(d)
    await producer.enqueue("dash_jobs.quick", n=1)
    browser.get(d.base + "/")

    def shown(b: Any) -> tuple[str, str, str] | None:
        """The two queues' limit cells and the job limits section, read in one go (live updates replace them)."""
        cells = {c.get_attribute("data-limit"): c.text for c in b.find_elements(By.CSS_SELECTOR, "[data-limit]")}
        if "emails" not in cells or "default" not in cells:
            return None
        return (
            cells["emails"],
            cells["default"],
            b.find_element(By.CSS_SELECTOR, "section[aria-labelledby=limits-h]").text,
        )

    emails, default, job_limits = in_browser(browser, shown, what="the queues' limits")
    assert emails == "at most 3 running, 10/5s starts"  # shown before the queue has a job
    assert default == "none"
    assert "No job of this app declares a limit" in job_limits


async def test_replaying_a_dead_letter_from_the_page_makes_the_job_run(
    store: Store, producer: Soniq, browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from selenium.webdriver.common.by import By

    flag = tmp_path / "flag"
    d = dashboard(store, tmp_path, processes, writes=True)
    worker(store, tmp_path, processes)
    job_id = await producer.enqueue("dash_jobs.flaky", flag=str(flag))
    await until(lambda: producer.dead_letter.get(job_id), what="the first run dead-lettered")
    flag.touch()

    browser.get(d.base + "/dead-letters")
    selector = f'tr[data-job-id="{job_id}"]'
    in_browser(browser, lambda b: "MAX ATTEMPTS" in b.find_element(By.CSS_SELECTOR, selector).text, what="the row")
    in_browser(
        browser,
        lambda b: b.find_element(By.CSS_SELECTOR, selector).find_element(By.LINK_TEXT, "Replay…").click() or True,
        what="Replay clicked",
    )
    in_browser(browser, lambda b: "/confirm" in b.current_url, what="the confirmation page")
    in_browser(browser, lambda b: b.find_element(By.NAME, "api_key").send_keys(API_KEY) or True, what="the key typed")
    browser.find_element(By.ID, "confirm-button").click()
    in_browser(
        browser,
        lambda b: "replayed 1 dead-letter job" in b.find_element(By.CSS_SELECTOR, ".notice").text,
        what="the replay notice",
    )

    async def replayed_and_done() -> bool:
        rows = await producer.list_jobs(status="done", include_results=True)
        return any(r["job_name"] == "dash_jobs.flaky" and r["result"] == "recovered" for r in rows)

    await until(replayed_and_done, what="the replayed job done")
    assert (await producer.dead_letter.get(job_id))["resurrection_count"] == 1  # type: ignore[index]
    browser.get(d.base + "/jobs?status=done")
    assert "dash_jobs.flaky" in browser.find_element(By.ID, "live").text


async def test_a_worker_told_to_stop_is_shown_draining_then_stopped_and_its_row_requeued(
    store: Store, producer: Soniq, browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from selenium.webdriver.common.by import By

    marker = tmp_path / "holding"
    d = dashboard(store, tmp_path, processes)
    w = worker(store, tmp_path, processes)
    job_id = await producer.enqueue("dash_jobs.hold", marker=str(marker))
    await asyncio.to_thread(wait_for, marker.exists, what="the job running in the worker")

    browser.get(d.base + "/workers")
    in_browser(browser, lambda b: row_state(b) == "RUNNING", what="RUNNING")
    worker_id = in_browser(
        browser,
        lambda b: b.find_element(By.CSS_SELECTOR, "tr[data-worker-id]").get_attribute("data-worker-id"),
        what="id",
    )
    # The row it holds is listed in flight.
    in_browser(browser, lambda b: job_id[:8] in b.find_element(By.CSS_SELECTOR, "tr[data-worker-id]").text, what="held")
    mark_page(browser)

    w.signal(signal.SIGTERM)
    in_browser(browser, lambda b: row_state(b, worker_id) == "DRAINING", what="DRAINING")
    in_browser(browser, lambda b: row_state(b, worker_id) == "STOPPED", timeout=30, what="STOPPED")
    # What the shutdown did is on the row too: the held job nack'd back with its reason.
    in_browser(
        browser,
        lambda b: (
            "shutdown_timeout"
            in b.find_element(By.CSS_SELECTOR, f"tr[data-worker-id='{worker_id}'] .last-shutdown").text
        ),
        what="last shutdown",
    )
    shutdown = browser.find_element(By.CSS_SELECTOR, f"tr[data-worker-id='{worker_id}'] .last-shutdown").text
    assert job_id[:8] in shutdown
    assert "FORCE_TIMEOUT_PATH" in shutdown
    assert same_page(browser)
    assert await asyncio.to_thread(w.wait, 30) == 0

    row = await producer.get_job(job_id)
    assert row is not None
    assert row["status"] == "queued"
    assert row["attempts"] == 0  # nack'd: the retry budget is kept
    browser.get(d.base + f"/jobs/{job_id}")
    assert "QUEUED" in browser.find_element(By.ID, "live").text


async def test_writes_fail_without_the_key_and_change_nothing(
    store: Store, producer: Soniq, browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from selenium.webdriver.common.by import By

    d = dashboard(store, tmp_path, processes, writes=True)
    read_only = dashboard(store, tmp_path, processes)
    worker(store, tmp_path, processes)
    job_id = await producer.enqueue("dash_jobs.flaky", flag=str(tmp_path / "never"))
    await until(lambda: producer.dead_letter.get(job_id), what="a dead letter")

    client = HttpClient(d.base)
    token = client.csrf()
    form = {"action": "purge", "id": job_id, "csrf_token": token}
    assert client.post("/dead-letters/action", form)[0] == 403
    assert client.post("/dead-letters/action", {**form, "api_key": "wrong"})[0] == 403
    assert client.post("/dead-letters/action", form, headers={"X-Soniq-Api-Key": "wrong"})[0] == 403
    # The right key from another site's page is still refused: the Origin is not ours.
    status, _ = client.post(
        "/dead-letters/action", {**form, "api_key": API_KEY}, headers={"Origin": "http://evil.test"}
    )
    assert status == 403
    # The right key without the page's CSRF token is refused too.
    assert client.post("/dead-letters/action", {"action": "purge", "id": job_id, "api_key": API_KEY})[0] == 403
    other = HttpClient(read_only.base)
    other_form = {"action": "purge", "id": job_id, "csrf_token": other.csrf(), "api_key": API_KEY}
    assert other.post("/dead-letters/action", other_form, headers={"X-Soniq-Api-Key": API_KEY})[0] == 403

    browser.get(d.base + f"/dead-letters/confirm?action=purge&id={job_id}")
    browser.find_element(By.NAME, "api_key").send_keys("not the key")
    browser.find_element(By.ID, "confirm-button").click()
    in_browser(browser, lambda b: "API key" in b.find_element(By.ID, "refused-reason").text, what="the refusal")
    assert await producer.dead_letter.get(job_id) is not None

    browser.get(read_only.base + "/dead-letters")
    assert not browser.find_elements(By.LINK_TEXT, "Purge…")  # read-only pages offer no writes at all

    # And the key does work, so the refusals above were about the key.
    assert client.post("/dead-letters/action", {**form, "api_key": API_KEY})[0] == 200
    assert await producer.dead_letter.get(job_id) is None


async def test_script_in_a_job_name_and_error_renders_as_text(
    store: Store, producer: Soniq, browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    d = dashboard(store, tmp_path, processes)
    queued_id = await producer.enqueue(EVIL_NAME, queue="<b>q</b>")
    worker(store, tmp_path, processes)
    await until(lambda: producer.dead_letter.get(queued_id), what="the evil job dead-lettered")

    for path in ("/dead-letters", f"/jobs/{queued_id}", "/", "/jobs"):
        browser.get(d.base + path)
        text = browser.find_element(By.TAG_NAME, "body").text
        with pytest.raises(NoAlertPresentException):
            _ = browser.switch_to.alert.text
        assert browser.execute_script("return document.scripts.length") == 1, path  # ours only
        assert not browser.find_elements(By.CSS_SELECTOR, "img"), path
        assert not browser.find_elements(By.CSS_SELECTOR, "main b"), path
        if path in ("/dead-letters", f"/jobs/{queued_id}"):
            assert EVIL_NAME in text, path
            assert EVIL_ERROR in text, path
        if path == "/":
            assert "<b>q</b>" in text


async def test_every_page_is_keyboard_navigable_with_a_visible_focus(
    browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from dash_harness import make_store
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    d = dashboard(make_store("sqlite", tmp_path), tmp_path, processes)
    browser.get(d.base + "/")
    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)
    focused = browser.switch_to.active_element
    assert focused.text == "Skip to content"
    assert focused.value_of_css_property("outline-style") != "none"
    visited = []
    for _ in range(7):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        visited.append(browser.switch_to.active_element.text)
    assert visited[1:6] == ["Overview", "Jobs", "Dead letters", "Workers", "Schedules"]
    # Enter on a focused link follows it, like any real link.
    while browser.switch_to.active_element.text != "Workers":
        browser.switch_to.active_element.send_keys(Keys.SHIFT, Keys.TAB)
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    in_browser(browser, lambda b: b.current_url.endswith("/workers"), what="the workers page")
    assert "No worker has registered" in browser.find_element(By.ID, "live").text
