"""A soniq 0.1.0 test module, written only in 0.1.0's documented idioms.

It must pass unchanged; `conftest.py` beside it runs it on every backend. Nothing here
uses a name that 0.1.0 did not document.
"""

from __future__ import annotations

import pytest

from soniq import JobContext, Snooze
from soniq.testing import drain, make_app, wait_until

pytestmark = pytest.mark.asyncio


async def test_decorator_options_are_stored_on_the_row() -> None:
    app = make_app()

    @app.job(name="billing.charge", retries=2, queue="billing", priority=5, timeout=30)
    async def charge(amount: int) -> int:
        return amount

    job_id = await charge.enqueue(amount=10)
    job = await app.get_job(job_id)
    assert job is not None
    assert (job["queue"], job["priority"], job["max_attempts"], job["args"]) == ("billing", 5, 3, {"amount": 10})
    assert await drain(app) == [10]


async def test_retries_then_dead_letter_with_per_job_retry_delay() -> None:
    app = make_app()
    calls: list[int] = []

    @app.job(name="flaky", retries=1, retry_delay=0)
    async def flaky() -> None:
        calls.append(1)
        raise RuntimeError("upstream down")

    job_id = await app.enqueue("flaky")
    await drain(app)
    await wait_until(lambda: len(calls) >= 1)
    await drain(app)  # retry_delay=0: the retry is due at once
    assert len(calls) == 2
    await drain(app)
    assert len(calls) == 2, "no third run: retries=1 means two runs in all"
    dead = await app.dead_letter.list()
    assert [row["id"] for row in dead] == [job_id]
    assert "upstream down" in (dead[0]["last_error"] or "")


async def test_get_job_of_a_dead_lettered_job_says_dead_letter() -> None:
    app = make_app()

    @app.job(name="doomed", retries=0)
    async def doomed() -> None:
        raise RuntimeError("gone")

    job_id = await doomed.enqueue()
    await drain(app)
    job = await app.get_job(job_id)
    assert job is not None
    assert job["status"] == "dead_letter"


async def test_a_returned_snooze_runs_again_later_keeping_the_attempt() -> None:
    app = make_app()
    seen: list[int] = []

    @app.job(name="poll_export", retries=0)
    async def poll_export(ctx: JobContext) -> object:
        seen.append(ctx.attempt)
        if len(seen) == 1:
            return Snooze(seconds=0, reason="export not ready")
        return "ready"

    job_id = await app.enqueue("poll_export")
    results = await drain(app)
    if not results:  # the snoozed run is due again at once; a second pass runs it
        results = await drain(app)
    assert results == ["ready"]
    assert seen == [seen[0], seen[0]], "a snooze does not spend an attempt"
    job = await app.get_job(job_id)
    assert job is not None
    assert job["status"] == "done"


async def test_get_result_returns_what_the_handler_returned() -> None:
    app = make_app()

    @app.job(name="report.build")
    async def build(n: int) -> dict[str, int]:
        return {"rows": n}

    job_id = await build.enqueue(n=3)
    await drain(app)
    assert await app.get_result(job_id) == {"rows": 3}


async def test_unique_enqueue_returns_the_queued_job() -> None:
    app = make_app()

    @app.job(name="sync_account", unique=True)
    async def sync_account(account_id: int) -> None: ...

    first = await sync_account.enqueue(account_id=1)
    assert await sync_account.enqueue(account_id=1) == first
    assert await sync_account.enqueue(account_id=2) != first
    keyed = await app.enqueue("sync_account", dedup_key="nightly", account_id=9)
    assert await app.enqueue("sync_account", dedup_key="nightly", account_id=10) == keyed


async def test_job_context_is_injected() -> None:
    app = make_app()

    @app.job(name="ctx.echo", retries=4, queue="ctxq")
    async def echo(ctx: JobContext, word: str) -> dict[str, object]:
        return {
            "id": ctx.job_id,
            "name": ctx.job_name,
            "attempt": ctx.attempt,
            "max": ctx.max_attempts,
            "queue": ctx.queue,
            "worker": bool(ctx.worker_id),
            "word": word,
        }

    job_id = await echo.enqueue(word="hi")
    (result,) = await drain(app)
    assert result == {
        "id": job_id,
        "name": "ctx.echo",
        "attempt": 1,
        "max": 5,
        "queue": "ctxq",
        "worker": True,
        "word": "hi",
    }


async def test_hooks_run_and_a_failing_hook_never_fails_the_job() -> None:
    app = make_app()
    events: list[str] = []

    @app.before_job
    async def before(job_name: str, job_id: str, attempt: int) -> None:
        events.append(f"before {job_name} {attempt}")
        raise RuntimeError("a broken hook")

    @app.after_job
    def after(job_name: str, job_id: str, duration_ms: float) -> None:
        events.append(f"after {job_name}")

    @app.on_error
    async def failed(job_name: str, job_id: str, error: str, attempt: int) -> None:
        events.append(f"error {job_name}")

    @app.job(name="ok")
    async def ok() -> str:
        return "fine"

    @app.job(name="bad", retries=0)
    async def bad() -> None:
        raise ValueError("nope")

    await app.enqueue("ok")
    assert await drain(app) == ["fine"]
    await app.enqueue("bad")
    await drain(app)
    await wait_until(lambda: "error bad" in events)
    assert events[:2] == ["before ok 1", "after ok"]
    assert "before bad 1" in events


async def test_middleware_wraps_the_call_first_registered_outermost() -> None:
    app = make_app()
    order: list[str] = []

    @app.middleware
    async def outer(ctx: object, call_next: object) -> object:
        order.append("outer in")
        result = await call_next(ctx)  # type: ignore[operator]
        order.append("outer out")
        return result

    @app.middleware
    async def inner(ctx: object, call_next: object) -> object:
        order.append("inner in")
        result = await call_next(ctx)  # type: ignore[operator]
        order.append("inner out")
        return f"<{result}>"

    @app.job(name="wrapped")
    async def wrapped() -> str:
        order.append("handler")
        return "x"

    await app.enqueue("wrapped")
    assert await drain(app) == ["<x>"]
    assert order == ["outer in", "inner in", "handler", "inner out", "outer out"]
