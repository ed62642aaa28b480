"""A real ``soniq worker`` process for the process tests, and the spans it wrote."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from soniq import Soniq

TESTS_DIR = Path(__file__).parent
JOBS_MODULE = "otel_worker_jobs"
POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"

# What the child runs with: small budgets so each path takes a second or two.
CHILD_SETTINGS = {
    "SONIQ_SHUTDOWN_TIMEOUT": "1",
    "SONIQ_SYNC_HANDLER_GRACE_SECONDS": "1",
    "SONIQ_HEARTBEAT_INTERVAL": "0.5",
    "SONIQ_HEARTBEAT_TIMEOUT": "5",
    "SONIQ_POLL_INTERVAL": "0.1",
}


@dataclass(frozen=True)
class Store:
    url: str
    namespace: str | None

    def app(self) -> Soniq:
        """A producer-side app on the same store (the worker's jobs registered by name only)."""
        options = {"namespace": self.namespace} if self.namespace else None
        return Soniq(self.url, backend_options=options, poll_interval=0.1)


def postgres_reachable() -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


def require_postgres() -> None:
    if postgres_reachable():
        return
    message = (
        "PostgreSQL is not reachable on 127.0.0.1:5432; start it with "
        "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def new_namespace() -> str:
    return f"otel_{uuid.uuid4().hex[:10]}"


def wait_for(condition: Callable[[], Any], *, timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(0.02)


class WorkerProcess:
    """``python -m soniq worker --jobs-modules otel_worker_jobs`` with the spans file and log kept."""

    def __init__(self, store: Store, workdir: Path, **settings: str) -> None:
        self.spans_path = workdir / "spans.jsonl"
        self.log_path = workdir / "worker.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
        # Installed means on: the child loads soniq-otel through its entry point, as in production.
        env.update(CHILD_SETTINGS)
        env.update(settings)
        env["SONIQ_OTEL_TEST_URL"] = store.url
        env["SONIQ_OTEL_TEST_SPANS"] = str(self.spans_path)
        if store.namespace:
            env["SONIQ_OTEL_TEST_NAMESPACE"] = store.namespace
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "soniq", "worker", "--jobs-modules", JOBS_MODULE, "--concurrency", "2"],
            cwd=workdir,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_for_log(self, text: str, timeout: float = 20.0) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None and text not in self.log():
                raise AssertionError(f"worker exited ({self.proc.returncode}) before logging {text!r}:\n{self.log()}")
            return text in self.log()

        wait_for(seen, timeout=timeout, what=f"log line {text!r}")

    def signal(self, sig: signal.Signals = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()

    def spans(self) -> list[dict[str, Any]]:
        if not self.spans_path.exists():
            return []
        return [json.loads(line) for line in self.spans_path.read_text(encoding="utf-8").splitlines() if line]


def by_name(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"] == name]


def only(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = by_name(spans, name)
    assert len(found) == 1, f"expected one {name!r}, got {[s['name'] for s in spans]}"
    return found[0]


def shutdown_trace(spans: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The shutdown span and its transition spans in order, checked against SPEC section 8's timing rule."""
    root = only(spans, "soniq.worker.shutdown")
    steps = sorted(by_name(spans, "soniq.shutdown.transition"), key=lambda s: (s["start"], s["end"]))
    assert root["parent_id"] is None
    worker_id = root["attributes"]["soniq.worker.id"]
    for step in steps:
        assert step["parent_id"] == root["span_id"]
        assert step["trace_id"] == root["trace_id"]
        assert step["attributes"]["soniq.worker.id"] == worker_id
    assert steps[0]["start"] == root["start"]
    for before, after in itertools.pairwise(steps):
        assert after["start"] == before["end"]
    assert steps[-1]["end"] == root["end"]
    return root, steps


def edges(steps: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(s["attributes"]["soniq.shutdown.from_state"], s["attributes"]["soniq.shutdown.to_state"]) for s in steps]
