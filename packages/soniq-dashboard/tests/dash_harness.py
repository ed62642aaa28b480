"""Real processes for the dashboard tests: the store, a `soniq dashboard`, a `soniq worker`, and Chromium."""

from __future__ import annotations

import asyncio
import http.cookiejar
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from soniq import Soniq

TESTS_DIR = Path(__file__).parent
POSTGRES_URL = os.environ.get("SONIQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
API_KEY = "test-key-" + uuid.uuid4().hex
CHROMIUM_HINT = "apt-get install chromium chromium-driver"
WORKER_SETTINGS = {
    "SONIQ_SHUTDOWN_TIMEOUT": "3",
    "SONIQ_HEARTBEAT_INTERVAL": "0.3",
    "SONIQ_HEARTBEAT_TIMEOUT": "30",
    "SONIQ_POLL_INTERVAL": "0.1",
}


def skip_or_fail(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def require_postgres() -> None:
    host = urllib.parse.urlsplit(POSTGRES_URL)
    try:
        with socket.create_connection((host.hostname or "127.0.0.1", host.port or 5432), timeout=1):
            return
    except OSError:
        skip_or_fail(
            f"PostgreSQL is not reachable at {POSTGRES_URL}; start it with "
            "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`"
        )


def wait_for(condition: Callable[[], Any], *, timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Store:
    """One isolated store: a fresh SQLite file, or a fresh PostgreSQL schema named in the URL."""

    url: str
    namespace: str | None

    def app(self) -> Soniq:
        """A producer-side app in the test process; job names are registered by the caller."""
        return Soniq(self.url, poll_interval=0.1)


def make_store(kind: str, directory: Path) -> Store:
    if kind == "sqlite":
        return Store(f"sqlite:///{directory}/dash.db", None)
    require_postgres()
    namespace = f"dash_{uuid.uuid4().hex[:10]}"
    return Store(f"{POSTGRES_URL}?namespace={namespace}", namespace)


def child_env(store: Store, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env["SONIQ_OBSERVERS"] = ""
    env["SONIQ_DATABASE_URL"] = store.url
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra)
    return env


class Process:
    def __init__(self, args: list[str], env: dict[str, str], log: Path, cwd: Path) -> None:
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


class Dashboard(Process):
    """``python -m soniq dashboard`` on a free port, serving once ``/healthz`` answers."""

    def __init__(
        self,
        store: Store,
        workdir: Path,
        *,
        writes: bool = False,
        extra_env: dict[str, str] | None = None,
        extra_args: tuple[str, ...] = (),
        cwd: Path | None = None,
        script: bool = False,
        probe_key: str | None = None,
    ) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        # `python -m soniq`, or the `soniq` console script installed beside this interpreter.
        command = [str(Path(sys.executable).with_name("soniq"))] if script else [sys.executable, "-m", "soniq"]
        args = [*command, "dashboard", "--port", str(self.port), "--poll-interval", "0.3"]
        env = child_env(store, SONIQ_DASHBOARD_API_KEY=API_KEY, **(extra_env or {}))
        # With a read key set, the readiness probe carries it (every page needs it then).
        read_key = probe_key or env.get("SONIQ_DASHBOARD_READ_KEY")
        probe_headers = {"X-Soniq-Read-Key": read_key} if read_key else {}
        super().__init__(
            [*args, *(["--writes"] if writes else []), *extra_args],
            env,
            workdir / f"dashboard-{self.port}.log",
            cwd or workdir,
        )

        def ready() -> bool:
            if not self.alive():
                raise AssertionError(f"soniq dashboard exited:\n{self.log()}")
            try:
                probe = urllib.request.Request(self.base + "/healthz", headers=probe_headers)
                with urllib.request.urlopen(probe, timeout=2) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        wait_for(ready, timeout=30, what="the dashboard answering /healthz")


class Worker(Process):
    def __init__(self, store: Store, workdir: Path, *, extra_env: dict[str, str] | None = None) -> None:
        args = [sys.executable, "-m", "soniq", "worker", "--jobs-modules", "dash_jobs", "--concurrency", "2"]
        env = child_env(store, **(WORKER_SETTINGS | (extra_env or {})))
        super().__init__(args, env, workdir / f"worker-{uuid.uuid4().hex[:6]}.log", workdir)


class HttpClient:
    """A cookie-keeping HTTP client, for what a browser would send without one."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
        return self._send(urllib.request.Request(self.base + path, headers=headers or {}))

    def post(self, path: str, form: dict[str, str], headers: dict[str, str] | None = None) -> tuple[int, str]:
        body = urllib.parse.urlencode(form).encode()
        request = urllib.request.Request(self.base + path, data=body, method="POST", headers=headers or {})
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
        return self._send(request)

    def csrf(self) -> str:
        self.get("/dead-letters")
        return next(c.value for c in self.jar if c.name == "soniq_dashboard_csrf" and c.value is not None)

    def _send(self, request: urllib.request.Request) -> tuple[int, str]:
        try:
            with self.opener.open(request, timeout=10) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


def chromium_paths() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        missing = "chromium" if browser is None else "chromedriver"
        skip_or_fail(f"{missing} is not installed; install it with `{CHROMIUM_HINT}`")
    assert browser is not None
    assert driver is not None
    return browser, driver


def start_browser(profile: Path, *, width: int = 1280, height: int = 900) -> Any:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        skip_or_fail("selenium is not installed; pip install -r requirements-test.txt")
    browser, driver = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for CSP violations
    return webdriver.Chrome(service=Service(driver), options=options)


async def until(check: Any, *, timeout: float = 30.0, what: str) -> Any:
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


def in_browser(browser: Any, condition: Any, *, timeout: float = 30.0, what: str) -> Any:
    """Wait for `condition(browser)`; a live update may replace elements mid-check, so that retries."""
    from selenium.common.exceptions import (
        ElementNotInteractableException,
        NoSuchElementException,
        StaleElementReferenceException,
        WebDriverException,
    )
    from selenium.webdriver.support.ui import WebDriverWait

    def check(driver: Any) -> Any:
        try:
            return condition(driver)
        except WebDriverException as exc:
            # An element that a live update replaced while a command ran on it is reported either as stale
            # or as a node that "does not belong to the document": both mean look again.
            if "does not belong to the document" in str(exc):
                return False
            raise

    wait = WebDriverWait(
        browser,
        timeout,
        poll_frequency=0.05,
        # A field a live update is replacing cannot take keys for that moment: look again.
        ignored_exceptions=(StaleElementReferenceException, NoSuchElementException, ElementNotInteractableException),
    )
    return wait.until(check, message=what)


def type_into(browser: Any, name: str, text: str, *, what: str) -> None:
    """Put `text` in the form field `name` (replacing what it held) and wait until it holds exactly that,
    so a live update that replaced the field while it was typed in costs a retry, not a doubled value."""
    from selenium.webdriver.common.by import By

    def typed(driver: Any) -> bool:
        field = driver.find_element(By.NAME, name)
        field.clear()
        field.send_keys(text)
        return bool(driver.find_element(By.NAME, name).get_attribute("value") == text)

    in_browser(browser, typed, what=what)
