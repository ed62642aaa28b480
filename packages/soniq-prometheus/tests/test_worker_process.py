"""Done-when: a real ``soniq worker --metrics-port N`` scraped over HTTP on SQLite and PostgreSQL.

The worker runs jobs to done, a retry then a dead letter, recovers a row a dead worker held,
then shuts down with an async job nack'd and a sync thread it must wait for. `/metrics` is
scraped while the worker waits for that thread, and the port is closed once it is STOPPED.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from prom_testing import Samples, scrape, series, value, wait_for

from soniq import Soniq
from soniq.params import ClaimJobsParams, RegisterWorkerParams
from soniq.records import WorkerInfo

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

TESTS_DIR = Path(__file__).parent
POSTGRES_URL = os.environ.get("SONIQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
JOBS = "prom_worker_jobs"
WORKER_COMMAND = (sys.executable, "-m", "soniq", "worker", "--jobs-modules", JOBS, "--concurrency", "4")


@dataclass(frozen=True)
class Store:
    url: str
    namespace: str | None


def require_postgres() -> None:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return
    except OSError:
        message = "PostgreSQL is not reachable on 127.0.0.1:5432"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        return Store(f"sqlite:///{tmp_path}/t.db", None)
    require_postgres()
    return Store(POSTGRES_URL, f"prom_{uuid.uuid4().hex[:10]}")


async def _stub(**kwargs: Any) -> None:
    return None


@pytest_asyncio.fixture
async def producer(store: Store) -> AsyncIterator[Soniq]:
    app = Soniq(store.url, backend_options={"namespace": store.namespace} if store.namespace else None)
    app.job(name=f"{JOBS}.quick", queue="emails")(_stub)
    app.job(name=f"{JOBS}.flaky", max_retries=1)(_stub)
    app.job(name=f"{JOBS}.stuck")(_stub)
    app.job(name=f"{JOBS}.blocking")(_stub)
    await app.setup()
    yield app
    if store.namespace:
        await app.backend.drop_schema()
    await app.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_worker(store: Store, workdir: Path, port: int) -> tuple[subprocess.Popen[bytes], Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env.update(
        {
            # Installed means on; naming it alone also keeps soniq-otel out of this child.
            "SONIQ_OBSERVERS": "prometheus",
            "SONIQ_SHUTDOWN_TIMEOUT": "1",
            "SONIQ_SYNC_HANDLER_GRACE_SECONDS": "0.5",
            "SONIQ_HEARTBEAT_INTERVAL": "0.3",
            "SONIQ_HEARTBEAT_TIMEOUT": "1.5",
            "SONIQ_POLL_INTERVAL": "0.1",
            "SONIQ_RETRY_BACKOFF_BASE": "0.01",
            "SONIQ_RETRY_BACKOFF_MAX": "0.02",
            "SONIQ_PROM_TEST_URL": store.url,
            "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), *filter(None, [os.environ.get("PYTHONPATH")])]),
        }
    )
    if store.namespace:
        env["SONIQ_PROM_TEST_NAMESPACE"] = store.namespace
    log_path = workdir / "worker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*WORKER_COMMAND, "--metrics-port", str(port)],
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return proc, log_path


def name(job: str) -> str:
    return f"{JOBS}.{job}"


async def test_scraped_series_and_values(store: Store, producer: Soniq, tmp_path: Path) -> None:
    backend = await producer.connected_backend()
    # A row held by a worker that died without a word: the new worker's sweep must recover it.
    recovered_id = await producer.enqueue(f"{JOBS}.quick", n=0)
    await backend.register_worker(
        RegisterWorkerParams(WorkerInfo(id="ghost", hostname="h", pid=1, queues=None, concurrency=1))
    )
    claimed = await backend.claim_jobs(ClaimJobsParams(worker_id="ghost", queues=None, limit=1, mark_started=True))
    assert [row.id for row in claimed] == [recovered_id]
    for n in range(1, 4):
        await producer.enqueue(f"{JOBS}.quick", n=n)
    await producer.enqueue(f"{JOBS}.flaky")

    port = free_port()
    proc, log_path = start_worker(store, tmp_path, port)
    flag = tmp_path / "release-the-thread"
    try:

        def settled() -> Samples | None:
            if proc.poll() is not None:
                raise AssertionError(f"worker exited early:\n{log_path.read_text()}")
            s = scrape(port)
            done = s and value(s, "soniq_jobs_completed_total", queue="emails", job_name=name("quick"), status="done")
            dead = s and value(
                s, "soniq_dead_letters_total", queue="default", job_name=name("flaky"), reason="max_attempts"
            )
            return s if done == 4 and dead == 1 else None

        s = wait_for(settled, what="four done jobs, one dead letter")
        assert value(s, "soniq_jobs_started_total", queue="emails", job_name=name("quick")) == 4
        assert value(s, "soniq_jobs_started_total", queue="default", job_name=name("flaky")) == 2
        assert value(s, "soniq_jobs_completed_total", queue="default", job_name=name("flaky"), status="failed") == 1
        assert (
            value(s, "soniq_jobs_completed_total", queue="default", job_name=name("flaky"), status="dead_letter") == 1
        )
        assert value(s, "soniq_job_retries_total", queue="default", job_name=name("flaky"), reason="error") == 1
        assert value(s, "soniq_job_duration_seconds_count", queue="emails", job_name=name("quick"), status="done") == 4
        assert value(s, "soniq_jobs_in_progress", queue="emails", job_name=name("quick")) == 0
        assert value(s, "soniq_stale_recoveries_total", action="requeue") == 1
        assert value(s, "soniq_worker_state", state="RUNNING") == 1
        assert value(s, "soniq_shutdowns_total", outcome="drained") is None

        await producer.enqueue(f"{JOBS}.stuck")
        await producer.enqueue(f"{JOBS}.blocking", flag=str(flag))

        def both_running() -> bool:
            s = scrape(port)
            return bool(
                s
                and value(s, "soniq_jobs_in_progress", queue="default", job_name=name("stuck")) == 1
                and value(s, "soniq_jobs_in_progress", queue="default", job_name=name("blocking")) == 1
            )

        wait_for(both_running, what="the async and the sync job running")
        proc.send_signal(signal.SIGTERM)

        def waiting_for_thread() -> Samples | None:
            s = scrape(port)
            if not s or value(s, "soniq_worker_state", state="WAIT_FOR_THREAD") != 1:
                return None
            # The queue gauges are cached for a few seconds: wait for a read taken after the nack.
            queued = value(s, "soniq_queue_jobs", queue="default", state="queued")
            processing = value(s, "soniq_queue_jobs", queue="default", state="processing")
            return s if (queued, processing) == (1, 1) else None

        s = wait_for(waiting_for_thread, what="WAIT_FOR_THREAD with the nack'd row queued")
        assert (
            value(
                s,
                "soniq_nacks_total",
                queue="default",
                job_name=name("stuck"),
                reason="shutdown_timeout",
                written="true",
            )
            == 1
        )
        assert value(s, "soniq_jobs_completed_total", queue="default", job_name=name("stuck"), status="nacked") == 1
        assert value(s, "soniq_jobs_in_progress", queue="default", job_name=name("stuck")) == 0
        assert value(s, "soniq_jobs_in_progress", queue="default", job_name=name("blocking")) == 1
        transitions = {
            (dict(labels)["from_state"], dict(labels)["to_state"]): v
            for labels, v in series(s, "soniq_shutdown_transitions_total").items()
        }
        assert transitions == {
            ("RUNNING", "DRAINING"): 1,
            ("DRAINING", "FORCE_TIMEOUT_PATH"): 1,
            ("FORCE_TIMEOUT_PATH", "WAIT_FOR_THREAD"): 1,
        }
        assert {dict(k)["state"]: v for k, v in series(s, "soniq_worker_state").items()} == {
            "RUNNING": 0,
            "DRAINING": 0,
            "FORCE_TIMEOUT_PATH": 0,
            "WAIT_FOR_THREAD": 1,
            "STOPPED": 0,
        }
        # Store-read gauges: the nack'd row is due again, the sync row is still processing.
        assert value(s, "soniq_queue_gauges_up") == 1
        assert value(s, "soniq_queue_jobs", queue="default", state="scheduled") == 0
        assert value(s, "soniq_queue_jobs", queue="emails", state="queued") == 0
        assert value(s, "soniq_queue_jobs", queue="emails", state="processing") == 0
        age = value(s, "soniq_queue_oldest_job_age_seconds", queue="default")
        assert age is not None
        assert 0 <= age < 30
        assert value(s, "soniq_workers", state="stopping") == 1
        # Only ids of jobs could make series grow without bound; none is ever a label value.
        job_ids = {row["id"] for row in await producer.list_jobs(limit=1000)}
        assert not {v for (_, labels) in s for _, v in labels} & job_ids

        flag.touch()
        assert proc.wait(30) == 0, log_path.read_text()
        # Served from the worker's start to STOPPED, and not after.
        assert scrape(port) is None
    finally:
        flag.touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
