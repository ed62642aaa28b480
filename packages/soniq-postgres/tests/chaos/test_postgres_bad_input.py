"""Bad input met by real ``soniq worker`` processes on PostgreSQL, and the server lost during DRAINING.

This machine's server uses trust authentication, so a wrong password is
accepted; the wrong-credentials case is covered by an unknown user, a
missing database and an unreachable port instead.
"""

from __future__ import annotations

import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from soniq_contract_tests.chaos_scenarios import (
    Namespace,
    TcpProxy,
    check_bad_arguments,
    check_bad_handlers,
    one_error_line,
)
from soniq_contract_tests.process_harness import wait_for

pytestmark = pytest.mark.chaos


@pytest.fixture
def space(pg_url: str, tmp_path: Path) -> Iterator[Namespace]:
    namespace = Namespace(pg_url, f"bad_{uuid.uuid4().hex[:10]}", tmp_path)
    yield namespace
    namespace.cleanup()


def test_unserialisable_and_oversized_arguments_are_refused_and_the_queue_is_untouched(space: Namespace) -> None:
    check_bad_arguments(space)


def test_base_exceptions_and_bad_results_are_dead_lettered_unknown_names_stay_queued_and_the_worker_lives(
    space: Namespace,
) -> None:
    check_bad_handlers(space)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_wrong_database_user_or_port_is_one_clear_line(space: Namespace, pg_url: str) -> None:
    base = pg_url.rsplit("/", 1)[0]
    line = one_error_line(space.soniq("worker", "--database-url", base + "/soniq_no_such_database"))
    assert "database 'soniq_no_such_database' does not exist" in line
    parts = urlsplit(pg_url)
    wrong_user = pg_url.replace(f"//{parts.username}@", "//soniq_no_such_user@", 1)
    line = one_error_line(space.soniq("worker", "--database-url", wrong_user))
    assert 'role "soniq_no_such_user" does not exist' in line
    port = _free_port()
    line = one_error_line(space.soniq("worker", "--database-url", f"postgresql://postgres@127.0.0.1:{port}/test"))
    assert f"127.0.0.1:{port}" in line


def test_server_lost_during_draining_the_worker_exits_in_bound_and_recovery_settles_its_rows(
    space: Namespace, pg_url: str
) -> None:
    parts = urlsplit(pg_url)
    finished = space.enqueue("chaos.async", key="finished", seconds=0, fate="ok")
    with TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        via_proxy = pg_url.replace(parts.netloc, f"{parts.username}@127.0.0.1:{proxy.port}", 1)
        worker = space.start_worker(via_proxy, SHUTDOWN_TIMEOUT=1.5, PREFETCH_RELEASE_TIMEOUT=1)
        wait_for(lambda: (space.job(finished) or {}).get("status") == "done", timeout=20, what="the first job done")
        draining = space.enqueue("chaos.async", key="draining", seconds=0.6, fate="ok")
        abandoned = space.enqueue("chaos.async", key="abandoned", seconds=3.0, fate="ok")
        wait_for(
            lambda: space.runs("S", "draining") and space.runs("S", "abandoned"), timeout=20, what="both handlers run"
        )
        signalled = time.monotonic()
        worker.signal(signal.SIGTERM)
        worker.wait_log("RUNNING -> DRAINING")
        proxy.cut()
        # Bound: shutdown_timeout, the cancel unwind and nack budgets, the stopped mark, and slack.
        assert worker.wait_exit(15) == 0
        elapsed = time.monotonic() - signalled
    log = worker.log()
    assert space.runs("E", "draining") == [worker.popen.pid]  # its handler returned during DRAINING ...
    assert "could not write done for" in log  # ... but its done write never reached the server
    assert f"job {abandoned} (chaos.async): nack for shutdown_timeout not written" in log
    # It never marked itself stopped, so its heartbeat goes stale and the sweep takes both rows.
    assert "stays 'stopping': stale recovery settles the 2 rows it could not write" in log
    assert elapsed < 15
    for job_id in (draining, abandoned):
        row = space.job(job_id)
        assert row is not None
        assert row["status"] == "processing"  # left for stale recovery, as the log says

    sweeper = space.start_worker()
    for job_id in (draining, abandoned):
        wait_for(lambda job_id=job_id: (space.job(job_id) or {}).get("status") == "done", timeout=30, what="settled")
        row = space.job(job_id)
        assert row is not None
        assert row["attempts"] == 1  # the run lost with its worker counts against the budget
    assert space.runs("S", "draining") == [worker.popen.pid, sweeper.popen.pid]
    assert space.runs("S", "abandoned") == [worker.popen.pid, sweeper.popen.pid]
    first = space.job(finished)
    assert first is not None
    assert (first["status"], first["attempts"], first["result"]) == ("done", 0, {"key": "finished"})
    sweeper.signal(signal.SIGTERM)
    assert sweeper.wait_exit(15) == 0


def test_server_back_before_stopped_the_rows_it_could_not_write_are_still_recovered(
    space: Namespace, pg_url: str
) -> None:
    # A worker that gave up a write must not mark itself `stopped` (whose rows no sweep touches),
    # even when the server is back by the time it reaches STOPPED.
    parts = urlsplit(pg_url)
    with TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        via_proxy = pg_url.replace(parts.netloc, f"{parts.username}@127.0.0.1:{proxy.port}", 1)
        worker = space.start_worker(via_proxy, SHUTDOWN_TIMEOUT=2.5, PREFETCH_RELEASE_TIMEOUT=1)
        unwritten = space.enqueue("chaos.async", key="unwritten", seconds=0.3, fate="ok")
        abandoned = space.enqueue("chaos.async", key="abandoned", seconds=30, fate="ok")
        wait_for(
            lambda: space.runs("S", "unwritten") and space.runs("S", "abandoned"), timeout=20, what="both handlers run"
        )
        worker.signal(signal.SIGTERM)
        worker.wait_log("RUNNING -> DRAINING")
        proxy.cut()
        worker.wait_log("could not write done for", timeout=10)
        proxy.restore()
        assert worker.wait_exit(15) == 0
    log = worker.log()
    assert f"job {abandoned} (chaos.async) nack'd back to queued: shutdown_timeout" in log  # the server was back
    assert f"stays 'stopping': stale recovery settles the 1 rows it could not write ({unwritten})" in log
    sweeper = space.start_worker(SHUTDOWN_TIMEOUT=0.5)
    wait_for(lambda: (space.job(unwritten) or {}).get("status") == "done", timeout=30, what="the row recovered and run")
    row = space.job(unwritten)
    assert row is not None
    assert row["attempts"] == 1
    assert space.runs("S", "unwritten") == [worker.popen.pid, sweeper.popen.pid]
    sweeper.signal(signal.SIGTERM)
    assert sweeper.wait_exit(15) == 0
