"""A producer that forgets ``close()`` exits, and one app serves several event loops."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from soniq import Soniq
from soniq.params import GetJobParams, QueueStatsParams
from soniq_sqlite import SQLiteBackend

PRODUCER = textwrap.dedent(
    """
    import asyncio, sys
    from soniq import Soniq

    app = Soniq(sys.argv[1])

    @app.job(name="demo.send")
    async def send(to: str) -> None: ...

    async def main() -> None:
        await app.enqueue(send, to="a@example.com")
        print("enqueued", flush=True)

    asyncio.run(main())  # and no app.close(): the interpreter must still exit
    """
)


def test_a_producer_that_never_closes_the_app_exits(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/producer.db"
    done = subprocess.run(
        [sys.executable, "-c", PRODUCER, url], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "enqueued"

    async def queued() -> int:
        backend = SQLiteBackend.from_url(url)
        try:
            return (await backend.queue_stats(QueueStatsParams())).queued
        finally:
            await backend.close()

    assert asyncio.run(queued()) == 1


def test_one_app_enqueues_from_one_event_loop_after_another(tmp_path: Path) -> None:
    app = Soniq(f"sqlite:///{tmp_path}/loops.db")

    @app.job(name="demo.add")
    async def add(n: int) -> None: ...

    ids = [asyncio.run(app.enqueue(add, n=i)) for i in range(3)]

    async def read_back() -> list[dict[str, object] | None]:
        try:
            return [await app.get_job(job_id) for job_id in ids]
        finally:
            await app.close()

    rows = asyncio.run(read_back())
    assert [row["args"] if row else None for row in rows] == [{"n": 0}, {"n": 1}, {"n": 2}]


# aiosqlite's thread dies trying to answer the call in flight on the closed loop;
# that thread is the abandoned one, which is the point.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_backend_reconnects_when_the_previous_loop_ended_mid_batch(tmp_path: Path) -> None:
    """A loop that ends with writes still waiting leaves nothing the next loop trips on."""
    backend = SQLiteBackend.from_url(f"sqlite:///{tmp_path}/abandoned.db")

    async def first() -> None:
        await backend.connect()
        # Left running when asyncio.run ends: they are cancelled on the old loop.
        left = [asyncio.ensure_future(backend.get_job(GetJobParams(job_id="missing"))) for _ in range(5)]
        await asyncio.sleep(0)
        assert not all(task.done() for task in left)

    async def second() -> int:
        try:
            return (await backend.queue_stats(QueueStatsParams())).total
        finally:
            await backend.close()

    asyncio.run(first())
    assert asyncio.run(asyncio.wait_for(second(), 20)) == 0
