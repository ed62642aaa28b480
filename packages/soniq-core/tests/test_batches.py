"""Batches: `app.enqueue_batch` and `app.get_batch` on memory, SQLite and PostgreSQL; each callback
enqueued once, with the counts, when every member has finished; bad batches refused at the call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soniq import JobOptionsError, Soniq
from soniq.batches import BATCH_JOB, CALLBACK_WINDOW, MAX_BATCH_MEMBERS, BatchCounts, callback_key
from soniq_memory import MemoryBackend

on_stores = pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"], indirect=True)


async def drain(app: Soniq, wait_until: Callable[..., Any], done: Callable[[], bool]) -> None:
    async def finished() -> bool:
        await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
        return done()

    await wait_until(finished, timeout=30)


@on_stores
@pytest.mark.asyncio
async def test_callbacks_run_once_with_the_counts_when_every_member_has_finished(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any]
) -> None:
    app = make_app()
    calls: dict[str, list[dict[str, Any]]] = {"complete": [], "success": [], "failure": []}

    @app.job(max_retries=0)
    async def member(n: int) -> int:
        if n == 3:
            raise ValueError("three")
        return n

    @app.job()
    async def complete(batch: dict[str, Any]) -> None:
        calls["complete"].append(batch)

    @app.job()
    async def success(batch: dict[str, Any]) -> None:
        calls["success"].append(batch)

    @app.job()
    async def failure(batch: dict[str, Any]) -> None:
        calls["failure"].append(batch)

    batch_id = await app.enqueue_batch(
        [(member, {"n": n}) for n in range(5)], on_complete=complete, on_success=success, on_failure=failure
    )
    before = await app.get_batch(batch_id)
    assert before == {"id": batch_id, "total": 5, "done": 0, "dead_letter": 0, "cancelled": 0, "finished": False}
    await drain(app, wait_until, lambda: bool(calls["complete"]) and bool(calls["failure"]))
    expected = {"id": batch_id, "total": 5, "done": 4, "dead_letter": 1, "cancelled": 0}
    assert calls["complete"] == [expected]
    assert calls["failure"] == [expected]
    assert calls["success"] == []
    assert await app.get_batch(batch_id) == {**expected, "finished": True}
    finisher = await app.get_job(batch_id)
    assert finisher is not None
    assert finisher["job_name"] == BATCH_JOB
    assert finisher["status"] == "done"
    result = finisher["result"]
    assert set(result["callbacks"]) == {"on_complete", "on_failure"}


@on_stores
@pytest.mark.asyncio
async def test_a_batch_whose_members_all_succeed_calls_on_success_and_a_cancel_counts_as_a_failure(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any]
) -> None:
    app = make_app()
    seen: list[tuple[str, dict[str, Any]]] = []

    @app.job()
    async def step(n: int) -> int:
        return n

    @app.job()
    async def report(batch: dict[str, Any]) -> None:
        seen.append(("success", batch))

    @app.job()
    async def alarm(batch: dict[str, Any]) -> None:
        seen.append(("failure", batch))

    good = await app.enqueue_batch([(step, {"n": 1}), (step, {"n": 2})], on_success=report, on_failure=alarm)
    await drain(app, wait_until, lambda: len(seen) == 1)
    assert seen == [("success", {"id": good, "total": 2, "done": 2, "dead_letter": 0, "cancelled": 0})]

    bad = await app.enqueue_batch([(step, {"n": 3}), (step, {"n": 4})], on_success=report, on_failure=alarm)
    finisher = await app.get_job(bad)
    assert finisher is not None
    member_ids = finisher["args"]["members"]
    assert await app.cancel_job(member_ids[0])
    await drain(app, wait_until, lambda: len(seen) == 2)
    assert seen[1] == ("failure", {"id": bad, "total": 2, "done": 1, "dead_letter": 0, "cancelled": 1})


@on_stores
@pytest.mark.asyncio
async def test_a_second_run_of_the_finisher_enqueues_no_callback_again(make_app: Callable[..., Soniq]) -> None:
    app = make_app()

    @app.job()
    async def step() -> None:
        return None

    @app.job()
    async def done(batch: dict[str, Any]) -> None:
        return None

    batch_id = await app.enqueue_batch([(step, {})], on_complete=done)
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
    finisher = await app.get_job(batch_id)
    assert finisher is not None
    first_callback = finisher["result"]["callbacks"]["on_complete"]
    # What a finisher re-run after a SIGKILL does: the same keyed enqueue, which the window turns away.
    repeat = await app.enqueue(
        done,
        args={"batch": {}},
        unique_for=CALLBACK_WINDOW,
        dedup_key=callback_key(batch_id, "on_complete"),
    )
    assert repeat == first_callback


@pytest.mark.asyncio
async def test_get_batch_of_an_unknown_id_or_of_a_plain_job_is_none() -> None:
    app = Soniq(backend=MemoryBackend())

    @app.job()
    async def plain() -> None:
        return None

    job_id = await app.enqueue(plain)
    assert await app.get_batch(job_id) is None
    assert await app.get_batch("no-such-batch") is None
    await app.close()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("items", "options", "words"),
    [
        ([], {}, "at least one member"),
        ("not a list", {}, "list of"),
        ([("x",)], {}, "member 0"),
        ([("x", [1])], {}, "member 0"),
        ([("x", {})] * (MAX_BATCH_MEMBERS + 1), {}, "at most"),
        ([("x", {})], {"on_complete": 42}, "on_complete"),
    ],
)
async def test_a_bad_batch_is_refused_and_nothing_is_stored(items: Any, options: dict[str, Any], words: str) -> None:
    app = Soniq(backend=MemoryBackend())
    with pytest.raises(JobOptionsError, match=words):
        await app.enqueue_batch(items, **options)
    assert await app.list_jobs() == []
    await app.close()


@pytest.mark.asyncio
async def test_a_callback_that_takes_no_batch_keyword_is_refused() -> None:
    app = Soniq(backend=MemoryBackend())

    @app.job()
    async def step() -> None:
        return None

    @app.job()
    async def callback(total: int) -> None:
        return None

    with pytest.raises(JobOptionsError, match=r"on_success job .* must take a keyword argument 'batch'"):
        await app.enqueue_batch([(step, {})], on_success=callback)
    assert await app.list_jobs() == []
    await app.close()


def test_the_finisher_is_not_one_of_the_apps_jobs_but_every_worker_runs_it() -> None:
    app = Soniq(backend=MemoryBackend())
    assert app.registry.names() == []
    assert app.registry.runnable_names() == []  # a worker with no job of its own still refuses to start

    @app.job()
    async def step() -> None:
        return None

    assert BATCH_JOB not in app.registry.names()
    assert BATCH_JOB in app.registry.runnable_names()
    with pytest.raises(JobOptionsError, match="Soniq's own"):
        app.job(name=BATCH_JOB)(step)


@given(done=st.integers(0, 20), dead=st.integers(0, 20), cancelled=st.integers(0, 20))
@settings(max_examples=100, deadline=None)
def test_which_callbacks_apply(done: int, dead: int, cancelled: int) -> None:
    counts = BatchCounts(id="b", total=done + dead + cancelled, done=done, dead_letter=dead, cancelled=cancelled)
    assert counts.applies("on_complete")
    assert counts.applies("on_success") == (dead == 0 and cancelled == 0)
    assert counts.applies("on_failure") == (dead + cancelled > 0)
    assert counts.finished
