"""Several OS processes, each with its own backend, on one file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from soniq.params import EnqueueJobsParams
from soniq.records import NewJob
from soniq_sqlite import SQLiteBackend
from soniq_sqlite.schema import SCHEMA_VERSION

JobFactory = Callable[..., NewJob]

pytestmark = pytest.mark.asyncio

SCRIPT = Path(__file__).with_name("claimer_process.py")


def _start_together(commands: list[list[str]]) -> list[dict[str, object]]:
    """Start every process, wait until each says ready, release them at once, collect their JSON."""
    processes = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command in commands
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline().strip()
            assert line == "ready", process.stderr.read() if process.stderr else line
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        outcomes = []
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err
            outcomes.append(json.loads(out.strip().splitlines()[-1]))
        return outcomes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


async def test_concurrent_processes_never_claim_the_same_row(make_job: JobFactory, db_path: Path) -> None:
    url = f"sqlite:///{db_path}"
    producer = SQLiteBackend.from_url(url)
    jobs = [make_job(priority=i % 5) for i in range(1200)]
    try:
        await producer.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
    finally:
        await producer.close()

    outcomes = _start_together([["claim", url, f"worker-{n}"] for n in range(4)])

    claims = Counter(job_id for outcome in outcomes for job_id in outcome["claimed"])  # type: ignore[attr-defined]
    duplicates = [job_id for job_id, count in claims.items() if count > 1]
    assert duplicates == []
    assert set(claims) == {job.id for job in jobs}
    assert all(outcome["lost"] == [] for outcome in outcomes)
    with sqlite3.connect(db_path) as conn:
        statuses = dict(conn.execute("SELECT status, COUNT(*) FROM soniq_jobs GROUP BY status").fetchall())
    assert statuses == {"done": len(jobs)}


async def test_setup_from_several_processes_at_once_on_a_fresh_file(db_path: Path) -> None:
    url = f"sqlite:///{db_path}"
    outcomes = _start_together([["setup", url] for _ in range(3)])
    assert outcomes == [{"total": 0}] * 3
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_limited_claims_in_several_processes_never_exceed_max_concurrent(
    make_job: JobFactory, db_path: Path
) -> None:
    url, most_allowed, rows = f"sqlite:///{db_path}", 3, 150
    producer = SQLiteBackend.from_url(url)
    try:
        await producer.enqueue_jobs(EnqueueJobsParams(jobs=[make_job() for _ in range(rows)]))
    finally:
        await producer.close()

    seen: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        # Every claim commits under the file's one write lock, so each snapshot is a state the fleet was in.
        conn = sqlite3.connect(db_path, timeout=5)
        try:
            while not stop.is_set():
                seen.append(conn.execute("SELECT count(*) FROM soniq_jobs WHERE status = 'processing'").fetchone()[0])
                time.sleep(0.001)
        finally:
            conn.close()

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        outcomes = _start_together([["limited", url, f"worker-{n}", str(most_allowed)] for n in range(4)])
    finally:
        stop.set()
        sampler.join()
    claimed = [job_id for outcome in outcomes for job_id in outcome["claimed"]]  # type: ignore[attr-defined]
    assert len(claimed) == len(set(claimed)) == rows, "a row was claimed twice or never"
    assert max(seen) <= most_allowed, f"{max(seen)} rows processing at once under max_concurrent={most_allowed}"
    assert most_allowed in seen, f"four processes never filled the {most_allowed} slots: {sorted(set(seen))}"
