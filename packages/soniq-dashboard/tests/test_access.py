"""What an attacker tries: a rebound Host, no read key, secrets in job data, a planted driver, bad URLs.

Each test runs a real `soniq dashboard` process against a real store (SQLite, and PostgreSQL where
the store decides the outcome) and checks what the attacker, or the operator, sees.
"""

from __future__ import annotations

import base64
import html
import json
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from dash_harness import Dashboard, HttpClient, Store, Worker, child_env, free_port, make_store, until
from dash_jobs import SECRET_CARD, SECRET_TOKEN, SECRET_URL

from soniq import Soniq

pytestmark = [pytest.mark.slow]

READ_KEY = "read-key-for-tests-0123456789"
API_KEY_ARG = "k-live-api-key-77"
SECRETS = (SECRET_CARD, SECRET_TOKEN, "hunter2-pw", API_KEY_ARG)


def start(processes: list[Any], store: Store, tmp_path: Path, **kwargs: Any) -> Dashboard:
    d = Dashboard(store, tmp_path, **kwargs)
    processes.append(d)
    return d


def _stub(**kwargs: Any) -> None:
    raise AssertionError("runs in the worker process only")


def assert_no_secret(body: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in body, f"{secret!r} shown on {where}"


async def enqueue_charge(producer: Soniq) -> str:
    return await producer.enqueue(
        "dash_jobs.charge", card=SECRET_CARD, callback=SECRET_URL, api_key=API_KEY_ARG, amount=1250
    )


# -- 3. hosts ------------------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_rebound_host_is_refused_and_the_hosts_it_is_reached_by_answer(
    store: Store, producer: Soniq, tmp_path: Path, processes: list[Any]
) -> None:
    job_id = await enqueue_charge(producer)
    # Out of the box: the loopback names only.
    d = start(processes, store, tmp_path)
    client = HttpClient(d.base)
    for host in ("rebind.attacker.example", f"rebind.attacker.example:{d.port}", "ops.example"):
        for path in (f"/jobs/{job_id}", "/", "/healthz", "/charts/data"):
            status, body = client.get(path, headers={"Host": host})
            assert status == 400, (host, path, status)
            assert "does not answer to the host" in body
            assert_no_secret(body, f"{path} for Host {host}")
    for host in (f"127.0.0.1:{d.port}", f"localhost:{d.port}", "LOCALHOST", f"[::1]:{d.port}", "[::1]"):
        status, body = client.get(f"/jobs/{job_id}", headers={"Host": host})
        assert status == 200, (host, status)
        assert "dash_jobs.charge" in body

    # With names given on the command line and in the environment, those answer too, and nothing else.
    named = start(
        processes,
        store,
        tmp_path,
        extra_args=("--allowed-host", "ops.example", "--allowed-host", "[fd00::1]"),
        extra_env={"SONIQ_DASHBOARD_ALLOWED_HOSTS": "dash.internal, other.example"},
    )
    client = HttpClient(named.base)
    port = named.port
    for host in (
        "rebind.attacker.example",
        f"127.0.0.1.attacker.example:{port}",
        "localhost.attacker.example",
        "ops.example.attacker.example",
        "[fd00::2]",
    ):
        status, body = client.get(f"/jobs/{job_id}", headers={"Host": host})
        assert status == 400, (host, status)
        assert_no_secret(body, f"the job page for Host {host}")
    for host in (
        f"127.0.0.1:{port}",
        "ops.example",
        "OPS.example:443",
        f"dash.internal:{port}",
        "other.example",
        "[fd00::1]:80",
    ):
        status, body = client.get(f"/jobs/{job_id}", headers={"Host": host})
        assert status == 200, (host, status)
        assert "dash_jobs.charge" in body


# -- 3. the read key -----------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_with_a_read_key_every_page_needs_it_and_the_login_form_sets_a_strict_cookie(
    tmp_path: Path, processes: list[Any]
) -> None:
    store = make_store("sqlite", tmp_path)
    app = store.app()
    app.job(name="dash_jobs.charge", max_retries=0)(_stub)
    await app.setup()
    try:
        job_id = await enqueue_charge(app)
    finally:
        await app.close()
    d = start(processes, store, tmp_path, extra_env={"SONIQ_DASHBOARD_READ_KEY": READ_KEY})
    client = HttpClient(d.base)
    for path in ("/", "/jobs", f"/jobs/{job_id}", "/dead-letters", "/workers", "/schedules", "/charts"):
        status, body = client.get(path)
        assert status == 401, path
        assert "This dashboard needs its read key" in body
        assert_no_secret(body, path)
        assert "dash_jobs.charge" not in body
    for path in ("/healthz", "/charts/data", "/metrics", "/jobs?partial=live"):
        status, body = client.get(path)
        assert status == 401, path
        assert "default" not in body  # not even the queue names
    for wrong in ({"X-Soniq-Read-Key": "nope"}, {"Authorization": "Bearer nope"}, {"X-Soniq-Api-Key": READ_KEY}):
        assert client.get("/healthz", headers=wrong)[0] == 401
    # The static files and the icon stay open: the login page needs its stylesheet.
    assert client.get("/static/dashboard.css")[0] == 200
    assert client.get("/favicon.ico")[0] == 200

    status, body = client.get(f"/jobs/{job_id}", headers={"X-Soniq-Read-Key": READ_KEY})
    assert (status, "dash_jobs.charge" in body) == (200, True)
    status, body = client.get("/healthz", headers={"Authorization": f"Bearer {READ_KEY}"})
    assert status == 200
    assert json.loads(body)["ok"] is True

    status, body = client.post("/login", {"read_key": "guess", "next": "/jobs"})
    assert status == 401
    assert "That is not this dashboard's read key." in html.unescape(body)
    assert not any(c.name == "soniq_dashboard_read" for c in client.jar)
    # Logged in, the form sends the browser back where it was going, never to another site.
    status, body = client.post("/login", {"read_key": READ_KEY, "next": f"/jobs/{job_id}"})
    assert status == 200
    assert "dash_jobs.charge" in body
    cookie = next(c for c in client.jar if c.name == "soniq_dashboard_read")
    assert cookie.value is not None
    assert READ_KEY not in cookie.value
    assert cookie.has_nonstandard_attr("HttpOnly")
    assert cookie.get_nonstandard_attr("SameSite") == "Strict"
    assert client.get("/workers")[0] == 200
    other = HttpClient(d.base)
    status, body = other.post("/login", {"read_key": READ_KEY, "next": "//attacker.example/"})
    assert status == 200
    assert "Counts as of" in body  # the overview, not the other site


@pytest.mark.asyncio
async def test_the_login_form_works_in_a_browser_and_its_cookie_is_out_of_scripts_reach(
    browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    store = make_store("sqlite", tmp_path)
    app = store.app()
    await app.setup()
    await app.close()
    d = start(
        processes,
        store,
        tmp_path,
        extra_args=("--read-key-env", "OPS_DASHBOARD_KEY"),
        extra_env={"OPS_DASHBOARD_KEY": READ_KEY},
        probe_key=READ_KEY,
    )
    browser.delete_all_cookies()
    browser.get(d.base + "/workers")
    assert browser.find_element(By.TAG_NAME, "h1").text == "This dashboard needs its read key"
    browser.find_element(By.NAME, "read_key").send_keys("wrong")
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    refused = WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.ID, "login-refused"))
    assert refused[0].text == "That is not this dashboard's read key."
    browser.find_element(By.NAME, "read_key").send_keys(READ_KEY)
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(browser, 20).until(lambda b: b.current_url == d.base + "/workers")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Workers"
    assert "soniq_dashboard_read" not in browser.execute_script("return document.cookie")
    read = next(c for c in browser.get_cookies() if c["name"] == "soniq_dashboard_read")
    assert read["httpOnly"] is True
    assert read["sameSite"] == "Strict"
    browser.delete_all_cookies()


# -- 3. the warning ------------------------------------------------------------------------------------------


def _start_lines(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    """What `soniq dashboard` prints before it serves: its first stdout line and everything on stderr by then."""
    store = make_store("sqlite", tmp_path)
    (tmp_path / "dash.db").touch()
    proc = subprocess.Popen(
        [sys.executable, "-m", "soniq", "dashboard", "--port", str(free_port()), *args],
        env=child_env(store, **(env or {})),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # printed after the warning, so the warning is written by now
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=10)
    assert first.startswith("soniq dashboard for "), err
    return first, err


def test_bound_beyond_this_machine_without_a_read_key_it_warns_on_stderr(tmp_path: Path) -> None:
    out, err = _start_lines(tmp_path, "--host", "0.0.0.0")
    warnings = [line for line in err.splitlines() if line.startswith("WARNING:")]
    assert len(warnings) == 1, err
    assert "shows job data" in warnings[0]
    assert "anyone who can reach it" in warnings[0]
    assert "SONIQ_DASHBOARD_READ_KEY" in warnings[0]
    assert "WARNING" not in out
    _, quiet = _start_lines(tmp_path, "--host", "0.0.0.0", env={"SONIQ_DASHBOARD_READ_KEY": READ_KEY})
    assert "WARNING" not in quiet
    _, local = _start_lines(tmp_path)
    assert "WARNING" not in local


# -- 3. masking ----------------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_arguments_results_and_errors_are_masked_on_every_page(
    store: Store, producer: Soniq, tmp_path: Path, processes: list[Any]
) -> None:
    d = start(processes, store, tmp_path, writes=True)
    processes.append(Worker(store, tmp_path))
    charge_id = await enqueue_charge(producer)
    mint_id = await producer.enqueue("dash_jobs.mint", user="ann")
    await until(lambda: producer.dead_letter.get(charge_id), what="the charge dead-lettered")
    done = await until(
        lambda: _done(producer, mint_id),
        what="the mint job done",
    )
    assert done["result"]["token"] == SECRET_TOKEN  # the store has it; the pages must not show it

    client = HttpClient(d.base)
    status, page = client.get(f"/jobs/{charge_id}")
    page = html.unescape(page)
    assert status == 200
    assert_no_secret(page, "the dead-lettered job's page")
    assert '"card": "***"' in page
    assert '"api_key": "***"' in page
    assert "https://bot:***@pay.example/callback" in page  # in the arguments and in the error
    assert '"amount": 1250' in page  # what is no secret is still shown
    assert "ConnectionError: could not reach https://bot:***@pay.example/callback" in page

    status, page = client.get(f"/jobs/{mint_id}")
    page = html.unescape(page)
    assert status == 200
    assert_no_secret(page, "the done job's page")
    assert '"token": "***"' in page
    assert '"user": "ann"' in page

    for path in ("/dead-letters", "/jobs", "/jobs?status=done", f"/jobs?q={charge_id}"):
        status, page = client.get(path)
        assert status == 200, path
        assert_no_secret(page, path)
    status, page = client.get("/dead-letters")
    assert "could not reach https://bot:***@pay.example" in page
    status, page = client.get(f"/dead-letters/confirm?action=replay&id={charge_id}")
    assert status == 200
    assert_no_secret(page, "the confirmation page")
    page = html.unescape(page)
    assert 'card="***"' in page
    assert 'api_key="***"' in page
    assert "amount=1250" in page


async def _done(app: Soniq, job_id: str) -> dict[str, Any] | None:
    row = await app.get_job(job_id)
    return row if row is not None and row.get("status") == "done" else None


# -- 4. a planted driver -------------------------------------------------------------------------------------


@pytest.mark.parametrize("script", [False, True], ids=["python-m", "console-script"])
@pytest.mark.asyncio
async def test_a_planted_driver_in_the_working_directory_never_runs(
    tmp_path: Path, processes: list[Any], script: bool
) -> None:
    store = make_store("sqlite", tmp_path)
    app = store.app()
    await app.setup()
    await app.close()
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "aiosqlite.py").write_text("open('PLANTED_RAN', 'w').close()\nraise SystemExit(99)\n")
    (workdir / "plantapp.py").write_text(f"from soniq import Soniq\n\napp = Soniq({store.url!r})\n")
    for form in (("plantapp:app",), ("--app", "plantapp:app")):
        d = start(processes, store, tmp_path, cwd=workdir, script=script, extra_args=form)
        status, body = HttpClient(d.base).get("/jobs")
        assert status == 200, d.log()
        assert "Jobs" in body
        assert not (workdir / "PLANTED_RAN").exists()  # the app module was found there; the driver was not


# -- item 8: what no store can answer ------------------------------------------------------------------------


def _cursor(at: str, job_id: str) -> str:
    raw = json.dumps({"t": at, "i": job_id})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.mark.asyncio
async def test_ids_and_filters_no_store_can_hold_are_answered_400_or_404_never_500(
    store: Store, producer: Soniq, tmp_path: Path, processes: list[Any]
) -> None:
    job_id = await producer.enqueue("dash_jobs.quick", n=1)
    d = start(processes, store, tmp_path, writes=True)
    client = HttpClient(d.base)
    nul, surrogate = "%00", "%ED%A0%80"  # NUL, and U+D800 (a lone surrogate) as UTF-8 would spell it
    refused = [
        f"/jobs/{nul}",
        f"/jobs/abc{nul}def",
        f"/jobs/{surrogate}",
        f"/jobs/{job_id}{nul}",
        f"/jobs?q={nul}",
        f"/jobs?q=x{nul}",
        f"/jobs?q={surrogate}",
        f"/jobs?queue={nul}",
        f"/jobs?queue={surrogate}",
        f"/jobs?name=dash{nul}",
        f"/jobs?name={surrogate}",
        f"/jobs?status={nul}",
        f"/dead-letters?queue={nul}",
        f"/dead-letters?name={surrogate}",
        f"/dead-letters/confirm?action=replay&id={nul}",
        f"/dead-letters/confirm?action=purge&queue={surrogate}",
        f"/jobs?q={'9' * 5000}",
        f"/jobs?queue={'q' * 5000}",
        f"/jobs/{'x' * 9000}",
    ]
    for path in refused:
        status, body = client.get(path)
        assert status in (400, 404), (path, status, body[:300])
    status, body = client.get(f"/jobs?q={nul}")
    assert status == 400
    assert "NUL" in body
    # Filters no queue or job can match, yet nothing a URL cannot carry: an empty page or a 400, never a 500.
    for path in (
        "/jobs?queue=%01",
        "/jobs?queue=a,b",
        "/jobs?queue=%20padded%20",
        f"/jobs?queue={'q' * 300}",
        f"/jobs?name={'n' * 300}",
        "/dead-letters?queue=%1B%5B2J",
        f"/dead-letters?name={'n' * 300}",
        f"/dead-letters/confirm?action=purge&queue={'q' * 300}",
        f"/jobs/{'x' * 300}",
    ):
        status, body = client.get(path)
        assert status in (200, 400, 404), (path, status, body[:300])
    # Numbers the dashboard does not take are ignored: its pages are a fixed size, walked by cursor.
    huge = "9" * 400
    for path in (
        f"/jobs?limit={huge}",
        f"/jobs?page={huge}&limit=-1",
        f"/dead-letters?limit={huge}&page={huge}",
        f"/charts/data?limit={huge}",
    ):
        assert client.get(path)[0] == 200, path
    # Cursors made up rather than made by the Next link: read as none (the first page), never a 500.
    for cursor in (
        _cursor("2026-01-01T00:00:00+00:00", "a\x00b"),
        _cursor("2026-01-01T00:00:00+00:00", "\ud800"),
        _cursor("2026-01-01T00:00:00+00:00", "z" * 1100),
        _cursor("9999-12-31T23:59:59-23:59", "x"),
        _cursor("0001-01-01T00:00:00+23:59", "x"),
        _cursor("2026-01-01T00:00:00+00:00", 12),  # type: ignore[arg-type]
        "not-base64!",
    ):
        for path in ("/jobs?", "/dead-letters?", "/jobs?status=done&"):
            status, body = client.get(path + urllib.parse.urlencode({"after": cursor}))
            assert status == 200, (path, cursor, status, body[:300])
    status, body = client.get(f"/jobs/{job_id}")
    assert (status, "dash_jobs.quick" in body) == (200, True)  # a real id still works
