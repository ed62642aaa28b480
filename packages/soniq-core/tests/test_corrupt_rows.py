"""A claimed row whose stored args cannot be decoded goes to the dead-letter table; its claim-mates run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from soniq import Soniq

pytestmark = pytest.mark.asyncio


async def corrupt(app: Soniq, kind: str, job_id: str, raw_args: str) -> None:
    """Overwrite a queued row's args with text no producer of this app would write."""
    backend: Any = await app.connected_backend()
    if kind == "postgres" and not raw_args.endswith(("]", "}")):
        pytest.skip("a PostgreSQL json column refuses invalid JSON text, so such a row cannot exist there")
    if kind == "memory":
        backend.put_raw_args(job_id, raw_args)
        return
    if kind == "sqlite":
        import sqlite3

        path = app.settings.resolved_database_url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as connection:
            connection.execute("UPDATE soniq_jobs SET args = ? WHERE id = ?", (raw_args, job_id))
        return
    import asyncpg

    schema = app.backend_options["namespace"]
    connection = await asyncpg.connect(app.settings.resolved_database_url)
    try:
        await connection.execute(f'UPDATE "{schema}".soniq_jobs SET args = $1::json WHERE id = $2', raw_args, job_id)
    finally:
        await connection.close()


@pytest.mark.parametrize("raw_args", ["[1, 2, 3]", "[" * 5_000 + "]" * 5_000, '{"n": 2,'])
async def test_a_corrupt_row_is_dead_lettered_at_once_and_the_rest_of_its_claim_runs(
    make_app: Callable[..., Soniq], store: tuple[str, str, dict[str, Any]], raw_args: str
) -> None:
    app = make_app(concurrency=4)

    @app.job(max_retries=5)
    async def echo(n: int) -> int:
        return n

    before = await app.enqueue(echo, n=1)
    bad = await app.enqueue(echo, n=2)
    after = await app.enqueue(echo, n=3)
    await corrupt(app, store[0], bad, raw_args)
    listed = await app.list_jobs()
    assert {row["id"] for row in listed} == {before, bad, after}

    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)

    for job_id, n in ((before, 1), (after, 3)):
        row = await app.get_job(job_id)
        assert row is not None
        assert (row["status"], row["result"]) == ("done", n)
    dead = await app.dead_letter.get(bad)
    assert dead is not None
    assert dead["dead_letter_reason"] == "corrupt_row"
    assert dead["attempts"] == 1  # dead_letter_job counts the claim as the run it was
    assert dead["last_error"].startswith("the stored row could not be decoded: ")
    assert "args" in dead["last_error"]
