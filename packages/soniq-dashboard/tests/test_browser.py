"""The dashboard in real Chromium, against real `soniq dashboard` and `soniq worker` processes, SQLite and Postgres."""

from __future__ import annotations

import asyncio
import re
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dash_harness import API_KEY, Dashboard, HttpClient, Store, Worker, in_browser, type_into, until, wait_for
from dash_jobs import EVIL_ERROR, EVIL_NAME

from soniq import Soniq

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


def dashboard(store: Store, tmp_path: Path, processes: list[Any], *, writes: bool = False) -> Dashboard:
    d = Dashboard(store, tmp_path, writes=writes)
    processes.append(d)
    return d


def worker(store: Store, tmp_path: Path, processes: list[Any]) -> Worker:
    w = Worker(store, tmp_path)
    processes.append(w)
    return w


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
    in_browser(browser, lambda b: b.find_element(By.CSS_SELECTOR, '[data-count="due"]').text == "1", what="count")


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
    type_into(browser, "api_key", API_KEY, what="the key typed")
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


async def test_a_killed_worker_is_shown_lost_with_the_rows_recovery_took_from_it(
    store: Store, producer: Soniq, browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from selenium.webdriver.common.by import By

    marker = tmp_path / "holding"
    d = dashboard(store, tmp_path, processes)
    killed = worker(store, tmp_path, processes)
    job_id = await producer.enqueue("dash_jobs.hold", marker=str(marker))
    await asyncio.to_thread(wait_for, marker.exists, what="the job running in the worker")
    browser.get(d.base + "/workers")
    worker_id = in_browser(
        browser,
        lambda b: b.find_element(By.CSS_SELECTOR, "tr[data-state=RUNNING]").get_attribute("data-worker-id"),
        what="the running worker",
    )

    killed.signal(signal.SIGKILL)
    assert await asyncio.to_thread(killed.wait, 10) == -signal.SIGKILL
    # A second worker that judges silence after 2s sweeps the first one's row and the job it held.
    sweeper = Worker(store, tmp_path, extra_env={"SONIQ_HEARTBEAT_TIMEOUT": "2"})
    processes.append(sweeper)
    await until(lambda: producer.dead_letter.get(job_id), what="the held job rescued")  # its one attempt spent

    row = f"tr[data-worker-id='{worker_id}']"
    in_browser(browser, lambda b: row_state(b, worker_id) == "LOST", what="LOST")
    cells = browser.find_element(By.CSS_SELECTOR, row).text
    assert "STOPPED" not in cells
    assert "lost while RUNNING, stopped by stale recovery" in cells
    took = browser.find_element(By.CSS_SELECTOR, f"{row} .rescued").text
    assert took == f"stale recovery took 1 row: {job_id[:8]} (dead-lettered: worker lost)"
    link = browser.find_element(By.CSS_SELECTOR, f"{row} .rescued a")
    assert link.get_attribute("href").endswith(f"/jobs/{job_id}")


async def test_the_schedules_page_lists_a_firing_schedule_and_pauses_and_resumes_it(
    store: Store, producer: Soniq, browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from selenium.webdriver.common.by import By

    await producer.scheduler.add("dash_jobs.quick", every=1, args={"n": 1}, name="tick")
    d = dashboard(store, tmp_path, processes, writes=True)
    processes.append(Worker(store, tmp_path, extra_env={"SONIQ_SCHEDULER_POLL_INTERVAL": "0.2"}))
    row = "tr[data-schedule='tick']"

    def cell(b: Any, label: str) -> str:
        return str(b.find_element(By.CSS_SELECTOR, f"{row} td[data-label='{label}']").text)

    browser.get(d.base + "/schedules")
    assert "no schedules yet" not in browser.find_element(By.TAG_NAME, "body").text
    in_browser(browser, lambda b: int(cell(b, "runs")) >= 2, what="the schedule firing, live on the page")
    assert cell(browser, "trigger") == "every 1s"
    assert cell(browser, "state") == "ACTIVE"
    assert cell(browser, "lateness") == "on time"
    assert UTC_TIME.match(cell(browser, "last run").splitlines()[0])
    assert UTC_TIME.match(cell(browser, "next run"))

    type_into(browser, "api_key", API_KEY, what="the key typed")
    in_browser(
        browser,
        lambda b: b.find_element(By.CSS_SELECTOR, f"{row} button[name=pause]").click() or True,
        what="Pause clicked",
    )
    in_browser(
        browser, lambda b: b.find_element(By.CSS_SELECTOR, ".notice").text == "paused schedule tick", what="notice"
    )
    assert cell(browser, "state") == "PAUSED"
    assert cell(browser, "lateness") == "paused"
    stored = await producer.scheduler.get("tick")
    assert stored is not None
    assert stored["paused"] is True
    runs = stored["run_count"]

    type_into(browser, "api_key", API_KEY, what="the key typed")
    browser.find_element(By.CSS_SELECTOR, f"{row} button[name=resume]").click()
    in_browser(
        browser, lambda b: b.find_element(By.CSS_SELECTOR, ".notice").text == "resumed schedule tick", what="notice"
    )
    assert cell(browser, "state") == "ACTIVE"

    async def fired_again() -> bool:
        view = await producer.scheduler.get("tick")
        return view is not None and view["run_count"] > runs

    await until(fired_again, what="the resumed schedule firing again")

    # A pause without the key changes nothing.
    client = HttpClient(d.base)
    token = client.csrf()
    assert client.post("/schedules/action", {"pause": "tick", "csrf_token": token})[0] == 403
    assert client.post("/schedules/action", {"pause": "tick", "csrf_token": token, "api_key": "wrong"})[0] == 403
    status, _ = client.post(
        "/schedules/action", {"pause": "tick", "csrf_token": token, "api_key": API_KEY}, {"Origin": "http://evil.test"}
    )
    assert status == 403
    assert client.post("/schedules/action", {"pause": "tick", "api_key": API_KEY})[0] == 403  # no CSRF token
    assert (await producer.scheduler.get("tick"))["paused"] is False  # type: ignore[index]


UTC_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")


async def test_the_overview_pauses_a_queue_the_worker_then_leaves_alone_and_resumes_it(
    store: Store, producer: Soniq, browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from selenium.webdriver.common.by import By

    d = dashboard(store, tmp_path, processes, writes=True)
    worker(store, tmp_path, processes)
    row = "tr[data-queue='default']"

    async def is_done(job_id: str) -> bool:
        job = await producer.get_job(job_id)
        return job is not None and job["status"] == "done"

    first = await producer.enqueue("dash_jobs.quick", n=1)
    await until(lambda: is_done(first), what="a first job done")
    browser.get(d.base + "/")
    in_browser(
        browser,
        lambda b: b.find_element(By.CSS_SELECTOR, row).get_attribute("data-state") == "active",
        what="the queue shown active",
    )

    # Typing in the form holds the live updates, so the row stays put while the button is clicked.
    type_into(browser, "api_key", API_KEY, what="the key typed")
    browser.find_element(By.NAME, "reason").send_keys("deploy 42")
    browser.find_element(By.CSS_SELECTOR, f"{row} button[name=pause]").click()
    in_browser(
        browser, lambda b: b.find_element(By.CSS_SELECTOR, ".notice").text == "paused queue default", what="notice"
    )
    state = browser.find_element(By.CSS_SELECTOR, f"{row} .queue-state").text
    assert "PAUSED" in state
    assert "deploy 42" in state
    assert re.search(r"since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: deploy 42", state)
    paused = await producer.paused_queues()
    assert [(p["queue"], p["reason"]) for p in paused] == [("default", "deploy 42")]

    # The worker leaves the paused queue alone and runs the others.
    held = await producer.enqueue("dash_jobs.quick", n=2)
    after = await producer.enqueue("dash_jobs.quick", n=3, queue="other")
    await until(lambda: is_done(after), what="the other queue's job done")
    assert (await producer.get_job(held))["status"] == "queued"  # type: ignore[index]

    type_into(browser, "api_key", API_KEY, what="the key typed")
    browser.find_element(By.CSS_SELECTOR, f"{row} button[name=resume]").click()
    in_browser(
        browser, lambda b: b.find_element(By.CSS_SELECTOR, ".notice").text == "resumed queue default", what="notice"
    )
    assert browser.find_element(By.CSS_SELECTOR, row).get_attribute("data-state") == "active"
    await until(lambda: is_done(held), what="the held job done after the resume")
    assert await producer.paused_queues() == []


async def test_jobs_due_later_show_their_run_at_and_filter_apart_with_every_time_in_utc(
    store: Store, producer: Soniq, browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    d = dashboard(store, tmp_path, processes)
    due = await producer.enqueue("dash_jobs.quick", n=1)
    run_at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    later = await producer.enqueue("dash_jobs.quick", n=2, scheduled_at=run_at)

    browser.get(d.base + "/jobs")

    def cell(b: Any, job_id: str, label: str) -> str:
        return str(b.find_element(By.CSS_SELECTOR, f"tr[data-job-id='{job_id}'] td[data-label='{label}']").text)

    assert cell(browser, later, "status") == "SCHEDULED"
    assert cell(browser, due, "status") == "QUEUED"
    assert cell(browser, later, "run at").splitlines() == [run_at.strftime("%Y-%m-%d %H:%M:%S UTC"), "in 1h 59m"]
    assert UTC_TIME.match(cell(browser, due, "run at"))
    assert UTC_TIME.match(cell(browser, due, "created"))

    Select(browser.find_element(By.NAME, "status")).select_by_visible_text("scheduled for later")
    browser.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
    in_browser(browser, lambda b: "status=scheduled" in b.current_url, what="the filtered page")
    ids = [r.get_attribute("data-job-id") for r in browser.find_elements(By.CSS_SELECTOR, "tr[data-job-id]")]
    assert ids == [later]
    browser.get(d.base + "/jobs?status=queued")
    ids = [r.get_attribute("data-job-id") for r in browser.find_elements(By.CSS_SELECTOR, "tr[data-job-id]")]
    assert ids == [due]

    # The page's own "Updated" time is UTC in the server's format, and stays so after a live update.
    first = browser.find_element(By.ID, "live-status").text
    assert re.fullmatch(r"Updated \d\d:\d\d:\d\d UTC", first)
    in_browser(browser, lambda b: b.find_element(By.ID, "live-status").text != first, what="a live update")
    assert re.fullmatch(r"Updated \d\d:\d\d:\d\d UTC", browser.find_element(By.ID, "live-status").text)


async def test_dead_letter_actions_fit_a_1400px_window_and_the_bulk_confirmation_shows_each_row(
    store: Store, producer: Soniq, browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from selenium.webdriver.common.by import By

    d = dashboard(store, tmp_path, processes, writes=True)
    worker(store, tmp_path, processes)
    secret = "hunter2-" + "x" * 8
    long_note = "a long note " * 20
    job_id = await producer.enqueue("dash_jobs.login", user="ann", password=secret, note=long_note, queue="logins")
    dead = await until(lambda: producer.dead_letter.get(job_id), what="the job dead-lettered")
    reason = str(dead["dead_letter_reason"]).replace("_", " ").upper()

    size = browser.get_window_size()
    browser.set_window_size(1400, 900)
    try:
        browser.get(d.base + "/dead-letters")
        in_browser(browser, lambda b: b.find_element(By.CSS_SELECTOR, f"tr[data-job-id='{job_id}']"), what="the row")
        fits = browser.execute_script(
            """
            const cell = document.querySelector(arguments[0] + " td[data-label=actions]");
            const box = cell.closest(".scroll");
            const buttons = Array.from(cell.querySelectorAll("a")).map(a => a.getBoundingClientRect());
            const edge = box.getBoundingClientRect().right;
            return {scrolls: box.scrollWidth > box.clientWidth, inside: buttons.every(r => r.right <= edge + 0.5),
                    seen: buttons.every(r => r.right <= window.innerWidth)};
            """,
            f"tr[data-job-id='{job_id}']",
        )
        assert fits == {"scrolls": False, "inside": True, "seen": True}
    finally:
        browser.set_window_size(size["width"], size["height"])

    browser.get(d.base + "/dead-letters?queue=logins")
    browser.find_element(By.LINK_TEXT, "Replay all matching…").click()
    in_browser(browser, lambda b: "/confirm" in b.current_url, what="the confirmation page")
    row = browser.find_element(By.CSS_SELECTOR, f"table.confirm-rows tr[data-job-id='{job_id}']")
    text = row.text
    assert "dash_jobs.login" in text
    assert row.find_element(By.CSS_SELECTOR, "td[data-label=queue]").text == "logins"
    assert row.find_element(By.CSS_SELECTOR, "td[data-label=reason]").text == reason
    preview = row.find_element(By.CSS_SELECTOR, "td[data-label=arguments]").text
    assert preview.startswith('user="ann", password=***, note="a long note')
    assert preview.endswith("…")
    assert len(preview) == 120
    assert secret not in browser.find_element(By.TAG_NAME, "body").text
    assert secret not in browser.page_source
    # The page has nothing live, and its poll says so by staying "Updated", never "paused: HTTP 500".
    first = browser.find_element(By.ID, "live-status").text
    later = in_browser(
        browser,
        lambda b: (t := b.find_element(By.ID, "live-status").text) != first and t,
        what="the confirmation page's poll answered",
    )
    assert later.startswith("Updated "), later


async def test_the_favicon_is_served_from_the_package(browser: Any, tmp_path: Path, processes: list[Any]) -> None:
    from dash_harness import make_store

    d = dashboard(make_store("sqlite", tmp_path), tmp_path, processes)
    browser.get(d.base + "/")
    script = "return fetch(arguments[0]).then(r => [r.status, r.headers.get('content-type')]);"
    for path in ("/favicon.ico", "/static/favicon.svg"):
        assert browser.execute_script(script, d.base + path) == [200, "image/svg+xml"], path
    icon = browser.execute_script("return document.querySelector('link[rel=icon]').href;")
    assert icon == d.base + "/static/favicon.svg"


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


async def test_a_running_jobs_progress_and_new_log_lines_appear_on_its_page_without_a_reload(
    store: Store, producer: Soniq, browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    d = dashboard(store, tmp_path, processes)
    worker(store, tmp_path, processes)
    job_id = await producer.enqueue("dash_jobs.report", gate=str(tmp_path / "gate"), steps=3)

    def bar(b: Any) -> str:
        return str(b.find_element(By.ID, "job-progress-bar").get_attribute("value"))

    def count(b: Any) -> str:
        return str(b.find_element(By.CSS_SELECTOR, ".progress-count").text)

    def log_messages(b: Any) -> list[str]:
        return [str(cell.text) for cell in b.find_elements(By.CSS_SELECTOR, "table.log td.log-message")]

    # The page may open before the worker has stored anything: what it stores arrives by the live poll.
    browser.get(d.base + f"/jobs/{job_id}")
    mark_page(browser)
    in_browser(browser, lambda b: bar(b) == "1" and count(b) == "1 of 3 (33.3%)", what="progress at step 1")
    in_browser(browser, lambda b: log_messages(b)[-1:] == ["step 1 of 3 done"], what="step 1's log line")

    (tmp_path / "gate.1").touch()
    in_browser(browser, lambda b: bar(b) == "2" and count(b) == "2 of 3 (66.6%)", what="progress at step 2")
    in_browser(browser, lambda b: log_messages(b)[-2:] == ["step 1 of 3 done", "step 2 of 3 done"], what="a new line")
    assert same_page(browser)
    assert "PROCESSING" in browser.find_element(By.ID, "live").text

    # What the handler wrote is text: no alert, no element made from it, the password masked.
    with pytest.raises(NoAlertPresentException):
        _ = browser.switch_to.alert.text
    assert browser.execute_script("return document.scripts.length") == 1
    assert not browser.find_elements(By.CSS_SELECTOR, "main img, main b")
    message = browser.find_element(By.CSS_SELECTOR, ".progress-message").text
    assert message.startswith("<script>alert('progress')</script> \\x1b[31mred\\x1b[0m via https://bot:***@")
    assert "first line\n  second line, indented\nthird <b>line</b>" in log_messages(browser)
    assert "hunter2-pw" not in browser.page_source

    # Finished: the page shows it live, then stops polling.
    (tmp_path / "gate.2").touch()
    (tmp_path / "gate.3").touch()
    in_browser(browser, lambda b: "DONE" in b.find_element(By.ID, "live").text, what="the job done, live")
    in_browser(
        browser,
        lambda b: b.find_element(By.ID, "live-status").text.endswith("the job has finished: live updates stopped"),
        what="the poll stopped",
    )
    assert count(browser) == "3 of 3 (100%)"
    assert log_messages(browser)[-1] == "step 3 of 3 done"
    assert same_page(browser)
