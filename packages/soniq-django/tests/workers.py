"""The worker process the tests start, and waiting on conditions with a deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db import connection

TESTS = Path(__file__).resolve().parent


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
