"""Bad input met by real ``soniq worker`` processes, and a TCP proxy to take a server away mid-run.

Each check leaves other jobs in the same namespace to show that only the bad
one was affected. Backends' chaos test modules call these with their URL.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from soniq import Soniq
from soniq.errors import JobArgumentsError
from soniq_contract_tests.chaos.jobs import build_app
from soniq_contract_tests.process_harness import WorkerProcess, read_runs, tear_down, wait_for

T = TypeVar("T")

FAST = {
    "SONIQ_HEARTBEAT_INTERVAL": "0.3",
    "SONIQ_HEARTBEAT_TIMEOUT": "1.5",
    "SONIQ_POLL_INTERVAL": "0.05",
    "SONIQ_RETRY_BACKOFF_BASE": "0.05",
    "SONIQ_RETRY_BACKOFF_MAX": "0.1",
    "SONIQ_OBSERVERS": "",
}
JOBS_MODULE = "soniq_contract_tests.chaos.jobs"


class Namespace:
    """One namespace on one backend URL, with real worker processes and in-process reads."""

    def __init__(self, url: str, namespace: str, directory: Path) -> None:
        self.url, self.namespace, self.directory = url, namespace, directory
        self.runlog = directory / "runs.log"
        (directory / "flaky").mkdir(parents=True, exist_ok=True)
        self.workers: list[WorkerProcess] = []

    def run(self, body: Callable[[Soniq], Awaitable[T]], **settings: Any) -> T:
        async def main() -> T:
            app = build_app(self.url, self.namespace, observers="", **settings)
            try:
                await app.setup()
                return await body(app)
            finally:
                await app.close()

        return asyncio.run(main())

    def enqueue(self, name: str, **kwargs: Any) -> str:
        async def body(app: Soniq) -> str:
            return await app.enqueue(name, args=kwargs)

        return self.run(body)

    def job(self, job_id: str) -> dict[str, Any] | None:
        async def body(app: Soniq) -> dict[str, Any] | None:
            return await app.get_job(job_id)

        return self.run(body)

    def is_done(self, job_id: str) -> bool:
        return (self.job(job_id) or {}).get("status") == "done"

    def dead_letter(self, job_id: str) -> dict[str, Any] | None:
        async def body(app: Soniq) -> dict[str, Any] | None:
            return await app.dead_letter.get(job_id)

        return self.run(body)

    def stats(self) -> dict[str, int]:
        async def body(app: Soniq) -> dict[str, int]:
            return await app.get_queue_stats()

        return self.run(body)

    def env(self, url: str | None = None, **settings: Any) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
        env.update(FAST)
        env.update({f"SONIQ_{k.upper()}": str(v) for k, v in settings.items()})
        env.update(
            SONIQ_CHAOS_URL=url or self.url,
            SONIQ_CHAOS_NAMESPACE=self.namespace,
            SONIQ_CHAOS_RUNLOG=str(self.runlog),
            PYTHONUNBUFFERED="1",
        )
        return env

    def start_worker(self, url: str | None = None, **settings: Any) -> WorkerProcess:
        log_path = self.directory / f"worker-{len(self.workers)}.log"
        with open(log_path, "wb") as handle:
            popen = subprocess.Popen(
                [sys.executable, "-m", "soniq", "worker", "--jobs-modules", JOBS_MODULE],
                env=self.env(url, **settings),
                stdout=handle,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
            )
        worker = WorkerProcess(popen=popen, stderr_path=log_path, started_at=time.monotonic())
        self.workers.append(worker)
        worker.wait_log("started:", timeout=30)
        return worker

    def soniq(self, *args: str, **settings: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "soniq", *args, "--jobs-modules", JOBS_MODULE],
            env=self.env(**settings),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.directory,
        )

    def runs(self, kind: str, key: str) -> list[int]:
        return read_runs(self.runlog, kind, key)

    def cleanup(self) -> None:
        tear_down(self.workers, self.run)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single ``soniq: error:`` line of a command that must fail cleanly."""
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("soniq: error:")]
    assert len(lines) == 1, result.stderr[-2000:]
    return lines[0]


def check_bad_arguments(space: Namespace) -> None:
    """Unserialisable and oversized arguments are refused with their reason; the queue is untouched."""
    bystander = space.enqueue("chaos.async", key="bystander", seconds=0, fate="ok")

    async def refuse(app: Soniq) -> list[str]:
        messages = []
        for bad in ({"key": object(), "seconds": 0, "fate": "ok"}, {"key": "x", "seconds": float("nan"), "fate": "ok"}):
            try:
                await app.enqueue("chaos.async", args=bad)
            except JobArgumentsError as exc:
                messages.append(str(exc))
        try:
            await app.enqueue_many("chaos.sync", [{"key": "fine", "seconds": 0, "fate": "ok"}, {"key": {1, 2}}])
        except JobArgumentsError as exc:
            messages.append(str(exc))
        try:
            await app.enqueue("chaos.async", key="big" * 100, seconds=0, fate="ok")
        except JobArgumentsError as exc:
            messages.append(str(exc))
        return messages

    messages = space.run(refuse, max_args_bytes=200)
    assert len(messages) == 4, messages
    assert all("arguments of job 'chaos." in m for m in messages)
    assert all("not JSON-serialisable" in m for m in messages[:3])
    assert "over the limit of 200 bytes" in messages[3]
    assert "SONIQ_MAX_ARGS_BYTES" in messages[3]
    assert space.stats() == {"total": 1, "queued": 1, "processing": 0, "done": 0, "dead_letter": 0, "cancelled": 0}
    worker = space.start_worker()
    wait_for(lambda: (space.job(bystander) or {}).get("status") == "done", timeout=20, what="the bystander done")
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(15) == 0


def check_bad_handlers(space: Namespace) -> None:
    """BaseException-raising handlers and unserialisable results end in the dead-letter table with
    their reason, a name the worker has not registered stays queued untouched; the same worker
    process lives on and runs the rest."""

    async def enqueue_all(app: Soniq) -> dict[str, str]:
        ids = {"before": await app.enqueue("chaos.async", key="before", seconds=0, fate="ok")}
        producer = Soniq(app.settings.resolved_database_url, backend=app.backend, observers="")

        @producer.job(name="chaos.only_on_the_producer")
        async def only_on_the_producer() -> None: ...

        ids["unknown"] = await producer.enqueue("chaos.only_on_the_producer")
        for kind in ("SystemExit", "KeyboardInterrupt", "BaseException"):
            ids[f"sync {kind}"] = await app.enqueue("chaos.exit", kind=kind)
            ids[f"async {kind}"] = await app.enqueue("chaos.exit_async", kind=kind)
        ids["unserialisable"] = await app.enqueue("chaos.unserialisable")
        ids["sync after"] = await app.enqueue("chaos.sync", key="sync-after", seconds=0, fate="ok")
        return ids

    ids = space.run(enqueue_all)
    worker = space.start_worker(CONCURRENCY=2)
    bad = {label: job_id for label, job_id in ids.items() if label not in ("before", "sync after", "unknown")}
    for label, job_id in bad.items():
        wait_for(functools.partial(space.dead_letter, job_id), timeout=20, what=f"{label} dead-lettered")
    for label in ("before", "sync after"):
        wait_for(functools.partial(space.is_done, ids[label]), timeout=20, what=f"{label} done")
    # A worker never claims a name it cannot run: the row waits for a worker that has the code.
    assert space.dead_letter(ids["unknown"]) is None
    unknown = space.job(ids["unknown"])
    assert unknown is not None
    assert (unknown["status"], unknown["attempts"], unknown["worker_id"]) == ("queued", 0, None)
    unserialisable = space.dead_letter(bad.pop("unserialisable"))
    assert unserialisable is not None
    assert "job result is not JSON-serialisable" in unserialisable["last_error"]
    for label, job_id in bad.items():
        row = space.dead_letter(job_id)
        assert row is not None
        assert (row["dead_letter_reason"], row["attempts"]) == ("max_attempts", 1)
        assert f"{label.split()[1]} raised by a chaos handler" in row["last_error"]
    assert worker.popen.poll() is None, worker.log()[-3000:]
    # The process that met all of that still takes new work.
    late = space.enqueue("chaos.async", key="late", seconds=0, fate="ok")
    wait_for(lambda: (space.job(late) or {}).get("status") == "done", timeout=20, what="a job enqueued afterwards")
    assert space.runs("S", "late") == [worker.popen.pid]
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(15) == 0
    # Each failed job's own traceback is logged; nothing of the worker's own may be.
    log = worker.log()
    assert "internal error" not in log
    assert "never retrieved" not in log


class TcpProxy:
    """A loopback TCP proxy in its own thread; `cut()` drops every connection and refuses new ones."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="soniq-test-proxy", daemon=True)

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the test proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._server = self.loop.run_until_complete(asyncio.start_server(self._pipe, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))

    def restore(self) -> None:
        """Listen again on the same port: the server is back."""

        async def listen() -> None:
            self._server = await asyncio.start_server(self._pipe, "127.0.0.1", self.port)

        asyncio.run_coroutine_threadsafe(listen(), self.loop).result(10)

    def cut(self) -> None:
        async def cut() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                transport = writer.transport
                transport.abort()
            self._writers.clear()

        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(cut(), self.loop).result(10)
