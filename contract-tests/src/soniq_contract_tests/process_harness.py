"""Real ``soniq worker`` processes for the shutdown scenarios: start, signal, read rows.

Every wait is on a condition with a deadline; nothing sleeps and hopes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from soniq import Soniq
from soniq.backend import SchemaAdmin, has_role

T = TypeVar("T")

FAST_SETTINGS = {
    "SONIQ_HEARTBEAT_INTERVAL": "0.3",
    "SONIQ_HEARTBEAT_TIMEOUT": "1.5",
    "SONIQ_POLL_INTERVAL": "0.05",
    "SONIQ_RETRY_BACKOFF_BASE": "0.05",
    "SONIQ_RETRY_BACKOFF_MAX": "0.1",
    "SONIQ_OBSERVERS": "",
}


def wait_for(condition: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.02) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@dataclass
class WorkerProcess:
    popen: subprocess.Popen[bytes]
    stderr_path: Path
    started_at: float
    exited_at: float | None = None

    def log(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def signal(self, sig: signal.Signals = signal.SIGTERM) -> float:
        self.popen.send_signal(sig)
        return time.time()

    def wait_exit(self, timeout: float) -> int:
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5)
            raise AssertionError(f"worker did not exit within {timeout}s; its log:\n{self.log()[-4000:]}") from None
        self.exited_at = time.monotonic()
        return code

    def wait_log(self, text: str, timeout: float = 15.0) -> None:
        wait_for(lambda: text in self.log() or self._died(), timeout=timeout, what=f"{text!r} in the worker log")
        if text not in self.log():
            raise AssertionError(f"worker exited before logging {text!r}:\n{self.log()[-4000:]}")

    def _died(self) -> bool:
        return self.popen.poll() is not None


@dataclass
class Scenario:
    """One scenario's namespace, run log and worker processes on one backend URL."""

    url: str
    options: Mapping[str, Any]
    directory: Path
    namespace: str = field(default_factory=lambda: "ct_p_" + uuid.uuid4().hex[:10])
    workers: list[WorkerProcess] = field(default_factory=list)

    @property
    def runlog(self) -> Path:
        return self.directory / "runs.log"

    def app(self, **settings: Any) -> Soniq:
        from soniq_contract_tests.worker_jobs import build_app

        merged = {"observers": "", **settings}
        return build_app(self.url, self.namespace, self.options, **merged)

    def run(self, body: Callable[[Soniq], Any], **settings: Any) -> Any:
        """Run `body(app)` on a fresh app connected to this scenario's namespace."""

        async def main() -> Any:
            app = self.app(**settings)
            try:
                await app.setup()
                return await body(app)
            finally:
                await app.close()

        return asyncio.run(main())

    def enqueue(self, name: str, **kwargs: Any) -> str:
        async def body(app: Soniq) -> str:
            return await app.enqueue(name, args=kwargs)

        result: str = self.run(body)
        return result

    def enqueue_many(self, name: str, items: list[dict[str, Any]]) -> list[str]:
        async def body(app: Soniq) -> list[str]:
            return await app.enqueue_many(name, items)

        result: list[str] = self.run(body)
        return result

    def job(self, job_id: str) -> dict[str, Any] | None:
        async def body(app: Soniq) -> dict[str, Any] | None:
            return await app.get_job(job_id)

        return self.run(body)  # type: ignore[no-any-return]

    def dead_letter(self, job_id: str) -> dict[str, Any] | None:
        async def body(app: Soniq) -> dict[str, Any] | None:
            return await app.dead_letter.get(job_id)

        return self.run(body)  # type: ignore[no-any-return]

    def runs(self, event: str, tag: str) -> list[int]:
        """The pids that logged `event` for `tag`, in order."""
        return read_runs(self.runlog, event, tag)

    def environment(self, settings: Mapping[str, Any]) -> dict[str, str]:
        """What a child process needs to build this scenario's app (see `worker_jobs`)."""
        env = dict(os.environ)
        env.update(FAST_SETTINGS)
        env.update({f"SONIQ_{k.upper()}": str(v) for k, v in settings.items()})
        env.update(
            SONIQ_CT_URL=self.url,
            SONIQ_CT_NAMESPACE=self.namespace,
            SONIQ_CT_OPTIONS=json.dumps(dict(self.options)),
            SONIQ_CT_RUNLOG=str(self.runlog),
            PYTHONUNBUFFERED="1",
        )
        env.pop("SONIQ_DATABASE_URL", None)
        return env

    def start_worker(self, *extra: str, **settings: Any) -> WorkerProcess:
        env = self.environment(settings)
        stderr_path = self.directory / f"worker-{len(self.workers)}.log"
        handle = open(stderr_path, "wb")  # noqa: SIM115 - the child owns it until it exits
        popen = subprocess.Popen(
            [sys.executable, "-m", "soniq", "worker", "--jobs-modules", "soniq_contract_tests.worker_jobs", *extra],
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=self.directory,
        )
        handle.close()
        worker = WorkerProcess(popen=popen, stderr_path=stderr_path, started_at=time.monotonic())
        self.workers.append(worker)
        worker.wait_log("started:", timeout=30)
        return worker

    def run_cli(self, *args: str, **settings: Any) -> subprocess.CompletedProcess[str]:
        env = self.environment(settings)
        return subprocess.run(
            [sys.executable, "-m", "soniq", *args, "--jobs-modules", "soniq_contract_tests.worker_jobs"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.directory,
        )

    def cleanup(self) -> None:
        tear_down(self.workers, self.run)


def tear_down(workers: list[WorkerProcess], run: Callable[[Callable[[Soniq], Any]], Any]) -> None:
    """Kill what is still running, then drop the namespace (best effort: it is unique anyway)."""
    for worker in workers:
        if worker.popen.poll() is None:
            worker.popen.kill()
            worker.popen.wait(10)

    async def drop(app: Soniq) -> None:
        backend: Any = app.backend
        if has_role(backend, SchemaAdmin):
            await backend.drop_schema()

    try:
        run(drop)
    except Exception:
        pass


def read_runs(path: Path, event: str, tag: str) -> list[int]:
    """The pids that logged `<event> <tag> <pid>` in a run log, in order."""
    if not path.exists():
        return []
    lines = [line.split(" ") for line in path.read_text(encoding="utf-8").splitlines()]
    return [int(parts[2]) for parts in lines if parts[:2] == [event, tag]]


def scenarios(url: str, options: Mapping[str, Any], directory: Path) -> Iterator[Scenario]:
    scenario = Scenario(url=url, options=options, directory=directory)
    try:
        yield scenario
    finally:
        scenario.cleanup()
