"""Batches and unique windows with real processes, on PostgreSQL, SQLite and Redis.

Producer processes enqueue batches while three worker processes run them and one worker is
SIGKILLed mid-run (its rows come back through stale recovery): every batch still ends with its
`on_complete` callback enqueued exactly once, carrying the counts `get_batch` reports, and its
`on_failure` callback exactly once when a member failed. Producer processes racing on one unique
window key store one job and all get its id.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from test_scheduling_processes import _redis_url

from soniq import Soniq
from soniq.params import JobPageParams

T = TypeVar("T")

JOBS = textwrap.dedent(
    """
    import asyncio
    import os
    from soniq import Soniq

    namespace = os.environ.get("BATCH_NAMESPACE")
    app = Soniq(os.environ["BATCH_URL"], backend_options={"namespace": namespace} if namespace else None)

    @app.job(name="batchp.member", max_retries=0)
    async def member(n: int) -> int:
        await asyncio.sleep(0.05)
        if n % 7 == 3:
            raise ValueError(f"member {n} fails on purpose")
        return n

    @app.job(name="batchp.complete")
    async def complete(batch: dict) -> dict:
        return batch

    @app.job(name="batchp.failure")
    async def failure(batch: dict) -> dict:
        return batch

    @app.job(name="batchp.report", unique_for=3600)
    async def report(day: str) -> str:
        return day
    """
)

PRODUCER = textwrap.dedent(
    """
    import asyncio, json, sys
    from batchp_jobs import app, complete, failure, member, report

    async def main() -> None:
        mode, count = sys.argv[1], int(sys.argv[2])
        await app.connect()
        if mode == "batches":
            ids = [
                await app.enqueue_batch(
                    [(member, {"n": n}) for n in range(20)], on_complete=complete, on_failure=failure
                )
                for _ in range(count)
            ]
        else:
            ids = await asyncio.gather(*(report.enqueue(day="2026-12-06") for _ in range(count)))
        print(json.dumps(list(ids)))
        await app.close()

    asyncio.run(main())
    """
)

ENV = {
    "SONIQ_OBSERVERS": "",
    "SONIQ_HEARTBEAT_INTERVAL": "0.3",
    "SONIQ_HEARTBEAT_TIMEOUT": "1.5",
    "SONIQ_POLL_INTERVAL": "0.05",
    "SONIQ_SCHEDULER_POLL_INTERVAL": "0.2",
    "SONIQ_LEADER_LEASE_TTL": "1.5",
    "SONIQ_SHUTDOWN_TIMEOUT": "2",
    "SONIQ_STALE_JOB_POLICY": "requeue",
}


@pytest.fixture(params=["postgres", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str | None]:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'queue.db'}", None
    if request.param == "redis":
        return _redis_url(), f"batch_{uuid.uuid4().hex[:10]}"
    return request.getfixturevalue("postgres_url"), f"batch_{uuid.uuid4().hex[:10]}"


def wait_for(condition: Callable[[], T | None], *, timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


class Fleet:
    """Worker and producer processes on one store, and in-process reads of it."""

    def __init__(self, url: str, namespace: str | None, directory: Path) -> None:
        self.url, self.namespace, self.directory = url, namespace, directory
        (directory / "batchp_jobs.py").write_text(JOBS)
        (directory / "batchp_produce.py").write_text(PRODUCER)
        self.workers: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
        env.update(ENV, BATCH_URL=self.url, PYTHONUNBUFFERED="1", PYTHONPATH=str(self.directory))
        if self.namespace:
            env["BATCH_NAMESPACE"] = self.namespace
        return env

    def run(self, body: Callable[[Soniq], Any]) -> Any:
        async def main() -> Any:
            options = {"namespace": self.namespace} if self.namespace else None
            app = Soniq(self.url, backend_options=options, observers="")
            try:
                await app.setup()
                return await body(app)
            finally:
                await app.close()

        return asyncio.run(main())

    def worker(self) -> subprocess.Popen[bytes]:
        log = self.directory / f"worker-{len(self.workers)}.log"
        with open(log, "wb") as handle:
            popen = subprocess.Popen(
                [sys.executable, "-m", "soniq", "worker", "--jobs-modules", "batchp_jobs", "--concurrency", "4"],
                env=self.env(),
                stdout=handle,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
            )
        self.workers.append(popen)
        wait_for(lambda: "started" in log.read_text() or popen.poll() is not None, timeout=30, what="a worker")
        assert popen.poll() is None, log.read_text()[-3000:]
        return popen

    def producers(self, mode: str, count: int, processes: int) -> list[list[str]]:
        command = [sys.executable, str(self.directory / "batchp_produce.py"), mode, str(count)]
        running = [
            subprocess.Popen(
                command, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.directory
            )
            for _ in range(processes)
        ]
        outputs = []
        for popen in running:
            out, err = popen.communicate(timeout=120)
            assert popen.returncode == 0, err.decode()[-3000:]
            outputs.append(json.loads(out))
        return outputs

    def rows(self, job_name: str) -> list[Any]:
        async def body(app: Soniq) -> list[Any]:
            backend: Any = await app.connected_backend()
            page = await backend.job_page(JobPageParams(job_name=job_name, limit=10_000, include_results=True))
            return list(page.rows)

        result: list[Any] = self.run(body)
        return result

    def batch(self, batch_id: str) -> dict[str, Any] | None:
        async def body(app: Soniq) -> dict[str, Any] | None:
            return await app.get_batch(batch_id)

        result: dict[str, Any] | None = self.run(body)
        return result

    def cleanup(self) -> None:
        for popen in self.workers:
            if popen.poll() is None:
                popen.kill()
                popen.wait(10)

        async def drop(app: Soniq) -> None:
            await app.backend.drop_schema()

        try:
            self.run(drop)
        except Exception:
            pass


@pytest.fixture
def fleet(store: tuple[str, str | None], tmp_path: Path) -> Iterator[Fleet]:
    url, namespace = store
    made = Fleet(url, namespace, tmp_path)
    made.run(lambda app: asyncio.sleep(0))  # the schema, before any process races to make it
    try:
        yield made
    finally:
        made.cleanup()


def test_every_batch_calls_back_once_across_workers_producers_and_a_sigkill(fleet: Fleet) -> None:
    fleet.worker()
    victim = fleet.worker()
    fleet.worker()
    batches = [batch_id for ids in fleet.producers("batches", 3, processes=2) for batch_id in ids]
    assert len(set(batches)) == 6
    wait_for(
        lambda: len(fleet.rows("batchp.member")) and any(r.status.value == "done" for r in fleet.rows("batchp.member")),
        timeout=60,
        what="members running",
    )
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    fleet.worker()

    def every_batch_finished() -> bool:
        completes = fleet.rows("batchp.complete")
        return len({row.args["batch"]["id"] for row in completes if row.status.value == "done"}) == len(batches)

    wait_for(every_batch_finished, timeout=120, what="every batch's on_complete to run")
    completes = fleet.rows("batchp.complete")
    failures = fleet.rows("batchp.failure")
    for batch_id in batches:
        counts = fleet.batch(batch_id)
        assert counts is not None
        assert counts["finished"]
        assert counts["total"] == 20
        called = [row.args["batch"] for row in completes if row.args["batch"]["id"] == batch_id]
        assert called == [{k: v for k, v in counts.items() if k != "finished"}]  # once, with these counts
        failed = [row.args["batch"] for row in failures if row.args["batch"]["id"] == batch_id]
        assert counts["dead_letter"] + counts["cancelled"] >= 3  # members 3, 10 and 17 fail on purpose
        assert len(failed) == 1


def test_producers_racing_on_one_window_store_one_job(fleet: Fleet) -> None:
    outputs = fleet.producers("window", 10, processes=4)
    ids = {job_id for ids in outputs for job_id in ids}
    assert len(ids) == 1
    assert [row.id for row in fleet.rows("batchp.report")] == list(ids)
