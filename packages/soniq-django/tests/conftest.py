from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

TESTS = Path(__file__).resolve().parent
# The test project (SONIQ_DJANGO_TEST_DB picks its database). Reading one setting loads the module now,
# which is what lets pytest-django's pytest_configure set Django up without --ds.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djproject.settings")
_ = settings.INSTALLED_APPS


def wait_until(predicate: Callable[[], Any], *, timeout: float, what: str) -> Any:
    """Poll `predicate` until it returns something truthy; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)


def _empty_soniq_tables() -> None:
    with connection.cursor() as cursor:
        for table in ("soniq_jobs", "soniq_dead_letter_jobs", "soniq_workers"):
            cursor.execute(f"DELETE FROM {table}")


@pytest.fixture
def soniq_db(transactional_db: None) -> Iterator[None]:
    """A committed-to database (a worker process must see the rows) whose Soniq tables start empty.

    pytest-django flushes only managed tables; Soniq's are unmanaged.
    """
    _empty_soniq_tables()
    yield
    _empty_soniq_tables()


class WorkerProcess:
    """`python manage.py soniq_worker` in its own process, on the test database."""

    def __init__(self, log_path: Path, args: list[str], settings: dict[str, str]) -> None:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "djproject.settings",
            "SONIQ_DJANGO_DB_NAME": str(connection.settings_dict["NAME"]),
            "SONIQ_POLL_INTERVAL": "0.1",
            "SONIQ_HEARTBEAT_INTERVAL": "0.5",
            **settings,
        }
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, str(TESTS / "manage.py"), "soniq_worker", *args],
            cwd=TESTS,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker still running after {timeout:g}s; log:\n{self.log}") from None

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self._log.close()


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*args: str, **settings: str) -> WorkerProcess:
        worker = WorkerProcess(tmp_path / f"worker-{len(started)}.log", list(args), settings)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.close()
