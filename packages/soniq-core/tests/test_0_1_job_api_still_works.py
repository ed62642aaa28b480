"""The job API of soniq 0.1.0 still works: decorator options, retry policy, JobContext, Snooze,
hooks, middleware and metrics sinks, on every backend against real servers."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pydantic
import pytest

from soniq import JobContext, JobOptionsError, Snooze, Soniq
from soniq.retry import per_job_delay

PG_URL = os.environ.get("SONIQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SONIQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
FAST: dict[str, Any] = {
    "observers": "",
    "poll_interval": 0.05,
    "heartbeat_interval": 0.2,
    "heartbeat_timeout": 2.0,
    "job_timeout": 30,
}


def _url(kind: str, tmp_path: Path) -> str:
    if kind == "memory":
        return f"memory://{uuid.uuid4().hex}"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    url, port = (PG_URL, 5432) if kind == "postgres" else (REDIS_URL, 6379)
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or port), timeout=1.0):
            pass
    except OSError:
        message = f"{kind} is not reachable at {url}: start it (see CONTRIBUTING) or set SONIQ_TEST_{kind.upper()}_URL"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return url


class Store:
    """Apps on one backend and a namespace of their own, dropped at the end."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.url = _url(kind, tmp_path)
        self.namespace = f"t_cj_{uuid.uuid4().hex[:12]}"
        self.made: list[Soniq] = []

    def app(self, **options: Any) -> Soniq:
        app = Soniq(self.url, backend_options={"namespace": self.namespace}, **{**FAST, **options})
        self.made.append(app)
        return app

    def cleanup(self) -> None:
        async def finish() -> None:
            cleaner = Soniq(self.url, backend_options={"namespace": self.namespace}, observers="")
            try:
                dropper: Any = getattr(cleaner.backend, "drop_schema", None)
                if dropper is not None:
                    await cleaner.connect()
                    await dropper()
            finally:
                await cleaner.close()

        for app in self.made:
            app.close_sync()
        if self.made:
            asyncio.run(finish())


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made = Store(str(request.param), tmp_path)
    yield made
    made.cleanup()


async def until(condition: Any, *, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.02)


async def drain(app: Soniq) -> None:
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 30)


async def run_worker_until(app: Soniq, condition: Any, *, timeout: float = 20.0) -> None:
    """A real worker in this loop until `condition` holds, then drained through its state machine."""
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    try:
        await until(condition, timeout=timeout)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 20)


class Order(pydantic.BaseModel):
    order_id: int
    amount: float = 0.0


# -- the decorator: checked at decoration, nothing stored ----------------------------------


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"retries": 2, "max_retries": 2}, "retries or max_retries"),
        ({"retry_delay": -1}, "retry_delay"),
        ({"retry_delay": []}, "retry_delay"),
        ({"retry_delay": [1, "x"]}, "retry_delay"),
        ({"retry_delay": float("nan")}, "retry_delay"),
        ({"retry_backoff": "yes"}, "retry_backoff"),
        ({"retry_jitter": 1}, "retry_jitter"),
        ({"retry_max_delay": -5}, "retry_max_delay"),
        ({"unique": "true"}, "unique"),
        ({"args_model": dict}, "args_model"),
        ({"validate": int}, "validate"),
        ({"args_model": Order, "validate": Order}, "args_model or validate"),
        ({"retries": -1}, "max_retries"),
    ],
)
def test_bad_decorator_options_name_the_option(options: dict[str, Any], fragment: str) -> None:
    app = Soniq("memory://", observers="")
    with pytest.raises((JobOptionsError, ValueError)) as info:

        @app.job(name="j", **options)
        async def j() -> None: ...

    assert fragment in str(info.value)
    assert app.registry.get("j") is None


def test_retries_is_max_retries_and_helpers_are_added() -> None:
    app = Soniq("memory://", observers="")

    @app.job(name="a", retries=5, queue="q", priority=7, timeout=3)
    async def a(x: int) -> None: ...

    definition = app.registry.require("a")
    assert (definition.max_retries, definition.max_attempts, definition.queue, definition.priority) == (5, 6, "q", 7)
    assert definition.timeout == 3.0
    assert callable(a.enqueue)
    assert callable(a.options)


def test_per_job_delays_follow_0_1_0() -> None:
    fixed = {"retry_backoff": False, "retry_max_delay": None, "retry_jitter": True}
    assert per_job_delay(attempt=3, retry_delay=5, **fixed) == 5.0
    assert [per_job_delay(attempt=n, retry_delay=(1, 10), **fixed) for n in (1, 2, 3)] == [1.0, 10.0, 10.0]
    backoff = {"retry_backoff": True, "retry_jitter": False}
    assert per_job_delay(attempt=4, retry_delay=2, retry_max_delay=None, **backoff) == 16.0
    assert per_job_delay(attempt=9, retry_delay=2, retry_max_delay=60, **backoff) == 60.0
    jittered = per_job_delay(attempt=4, retry_delay=2, retry_backoff=True, retry_max_delay=None, retry_jitter=True)
    assert 8.0 <= jittered <= 16.0


# -- enqueue: arguments bound to the handler, before anything is stored --------------------


def test_enqueue_binds_arguments_and_checks_the_model(store: Store) -> None:
    async def main() -> None:
        app = store.app()

        @app.job(name="ship")
        async def ship(order_id: int, ctx: JobContext, express: bool = False) -> None: ...

        @app.job(name="bill", validate=Order)
        async def bill(order_id: int, amount: float) -> None: ...

        try:
            await app.setup()
            with pytest.raises(JobOptionsError, match="unexpected 'oder_id'"):
                await ship.enqueue(oder_id=1)  # type: ignore[attr-defined]
            with pytest.raises(JobOptionsError, match="missing a required argument: 'order_id'"):
                await app.enqueue(ship, express=True)
            with pytest.raises(JobOptionsError, match="unexpected 'ctx'"):
                await app.enqueue(ship, order_id=1, ctx=None)  # the worker fills the context in
            with pytest.raises(JobOptionsError, match="args_model Order"):
                await bill.enqueue(order_id="not a number")  # type: ignore[attr-defined]
            with pytest.raises(JobOptionsError):
                await app.enqueue_many("ship", [{"order_id": 1}, {"nope": 2}])
            with pytest.raises(TypeError, match="keywords only"):
                await ship.enqueue(1)  # type: ignore[attr-defined]
            assert (await app.get_queue_stats())["total"] == 0
            job_id = await ship.options(queue="urgent", priority=3).enqueue(order_id=7)  # type: ignore[attr-defined]
            row = await app.get_job(job_id)
            assert row is not None
            assert (row["queue"], row["priority"], row["args"]) == ("urgent", 3, {"order_id": 7})
            when = datetime.now(UTC) + timedelta(hours=1)
            later = await app.schedule(ship, when, order_id=8)
            scheduled = await app.get_job(later)
            assert scheduled is not None
            assert abs((scheduled["scheduled_at"] - when).total_seconds()) < 1
        finally:
            await app.close()

    asyncio.run(main())


# -- in the worker: JobContext, the model again, Snooze, retry delays -----------------------


def test_job_context_is_injected_into_sync_and_async_handlers(store: Store) -> None:
    async def main() -> None:
        app = store.app()
        seen: dict[str, JobContext] = {}

        @app.job(name="a_ctx", queue="ctxq", retries=4)
        async def a_ctx(n: int, context: JobContext) -> int:
            seen["async"] = context
            return n

        @app.job(name="s_ctx", queue="ctxq")
        def s_ctx(n: int, ctx: JobContext) -> int:
            seen["sync"] = ctx
            return n

        try:
            await app.setup()
            first = await a_ctx.enqueue(n=1)  # type: ignore[attr-defined]
            second = await s_ctx.enqueue(n=2)  # type: ignore[attr-defined]
            await drain(app)
            assert set(seen) == {"async", "sync"}
            for key, job_id, name, max_attempts in (("async", first, "a_ctx", 5), ("sync", second, "s_ctx", 4)):
                ctx = seen[key]
                row = await app.get_job(job_id)
                assert row is not None
                assert row["status"] == "done"
                assert (ctx.job_id, ctx.job_name, ctx.queue, ctx.attempt) == (job_id, name, "ctxq", 1)
                assert ctx.max_attempts == max_attempts
                assert ctx.worker_id  # the claiming worker's id
                assert ctx.created_at is not None
                assert ctx.scheduled_at is not None
        finally:
            await app.close()

    asyncio.run(main())


def test_a_row_failing_its_model_in_the_worker_is_dead_lettered_as_invalid_arguments(store: Store) -> None:
    async def main() -> None:
        producer = store.app()
        worker_app = store.app()
        calls: list[dict[str, Any]] = []

        @producer.job(name="bill")
        async def bill_loose(order_id: Any) -> None: ...

        @worker_app.job(name="bill", args_model=Order, retries=5)
        async def bill(order_id: int, amount: float) -> None:
            calls.append({"order_id": order_id, "amount": amount})

        try:
            await producer.setup()
            bad = await producer.enqueue("bill", order_id="not a number")
            good = await producer.enqueue("bill", order_id="12")
            await drain(worker_app)
            assert calls == [{"order_id": 12, "amount": 0.0}]  # the model's coerced values reach the handler
            dead = await worker_app.dead_letter.get(bad)
            assert dead is not None
            assert dead["dead_letter_reason"] == "invalid_arguments"
            assert "args_model Order" in dead["last_error"]
            good_row = await worker_app.get_job(good)
            assert good_row is not None
            assert good_row["status"] == "done"
        finally:
            await producer.close()
            await worker_app.close()

    asyncio.run(main())


def test_returned_and_raised_snooze_keep_the_attempts_and_are_capped(store: Store) -> None:
    async def main() -> None:
        app = store.app(snooze_max_seconds=0.2)
        runs: dict[str, int] = {"returned": 0, "raised": 0}

        @app.job(name="returns", retries=0)
        async def returns() -> str:
            runs["returned"] += 1
            if runs["returned"] < 3:
                return Snooze(3600, reason="rate limited")  # type: ignore[return-value]  # capped to 0.2s
            return "finally"

        @app.job(name="raises", retries=0)
        def raises() -> str:
            runs["raised"] += 1
            if runs["raised"] < 3:
                raise Snooze(0.05)
            return "done too"

        try:
            await app.setup()
            returned = await app.enqueue(returns)
            raised = await app.enqueue(raises)

            async def both_done() -> bool:
                rows = [await app.get_job(returned), await app.get_job(raised)]
                return all(row is not None and row["status"] == "done" for row in rows)

            started = time.monotonic()
            await run_worker_until(app, both_done)
            # Two snoozes of an hour, each cut to 0.2s by snooze_max_seconds.
            assert time.monotonic() - started < 10
            assert runs == {"returned": 3, "raised": 3}
            for job_id, result in ((returned, "finally"), (raised, "done too")):
                row = await app.get_job(job_id)
                assert row is not None
                # retries=0: one attempt only, so a snooze that spent one would have dead-lettered the job.
                assert row["result"] == result
                assert row["attempts"] <= 1
        finally:
            await app.close()

    asyncio.run(main())


def test_snooze_rejects_bad_values() -> None:
    for bad in (-1, float("nan"), float("inf"), "soon"):
        with pytest.raises(ValueError, match="Snooze seconds"):
            Snooze(bad)  # type: ignore[arg-type]
    assert Snooze(5, reason="429") == Snooze(seconds=5, reason="429")


def test_per_job_retry_delay_list_sets_the_next_run(store: Store) -> None:
    async def main() -> None:
        app = store.app()

        @app.job(name="flaky", retries=2, retry_delay=[0, 3600])
        async def flaky() -> None:
            raise RuntimeError("down")

        try:
            await app.setup()
            job_id = await flaky.enqueue()  # type: ignore[attr-defined]

            async def attempts(n: int) -> bool:
                row = await app.get_job(job_id)
                return row is not None and row["attempts"] == n and row["status"] == "queued"

            await run_worker_until(app, lambda: attempts(2))
            row = await app.get_job(job_id)
            assert row is not None
            # Attempt 1 retried at once (0s), attempt 2 an hour out (the list's second entry).
            wait = (row["scheduled_at"] - datetime.now(UTC)).total_seconds()
            assert 3500 < wait <= 3600
        finally:
            await app.close()

    asyncio.run(main())


class DeclineTimeouts:
    def __init__(self) -> None:
        self.calls: list[tuple[int, str, str]] = []

    def delay_for(self, *, attempt: int, job_meta: dict[str, Any], exc: BaseException) -> float | None:
        self.calls.append((attempt, job_meta["name"], type(exc).__name__))
        if isinstance(exc, LookupError):
            return None
        return 0.0


def test_app_retry_policy_decides_and_none_dead_letters_now(store: Store) -> None:
    async def main() -> None:
        policy = DeclineTimeouts()
        app = store.app(retry_policy=policy)
        runs = {"n": 0}

        @app.job(name="uneven", retries=9, retry_delay=3600)
        async def uneven() -> None:
            runs["n"] += 1
            if runs["n"] == 1:
                raise RuntimeError("transient")
            raise KeyError("gone for good")

        try:
            await app.setup()
            job_id = await uneven.enqueue()  # type: ignore[attr-defined]
            await run_worker_until(app, lambda: app.dead_letter.get(job_id))
            # The policy's 0s beat the job's own retry_delay of an hour; its None ended the job on attempt 2 of 10.
            assert policy.calls == [(1, "uneven", "RuntimeError"), (2, "uneven", "KeyError")]
            dead = await app.dead_letter.get(job_id)
            assert dead is not None
            assert dead["dead_letter_reason"] == "non_retryable"
            assert "retry policy declined" in dead["last_error"]
        finally:
            await app.close()

    asyncio.run(main())


def test_retry_policy_without_delay_for_is_refused() -> None:
    with pytest.raises(TypeError, match="retry_policy"):
        Soniq("memory://", observers="", retry_policy=object())


# -- hooks and middleware ----------------------------------------------------------------


def test_hooks_and_middleware_run_in_order_and_a_failing_hook_never_fails_the_job(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        app = store.app()
        events: list[tuple[Any, ...]] = []

        @app.before_job
        async def before(job_name: str, job_id: str, attempt: int) -> None:
            await asyncio.sleep(0.01)  # awaited before the handler starts
            events.append(("before", job_name, attempt))

        @app.before_job
        def broken(job_name: str, job_id: str, attempt: int) -> None:
            raise RuntimeError("hook bug")

        @app.after_job
        def after(job_name: str, job_id: str, duration_ms: float) -> None:
            assert duration_ms >= 0
            events.append(("after", job_name))

        @app.on_error
        async def on_error(job_name: str, job_id: str, error: str, attempt: int) -> None:
            events.append(("error", job_name, error, attempt))

        @app.middleware
        async def outer(ctx: JobContext, call_next: Any) -> Any:
            events.append(("outer in", ctx.job_name))
            try:
                return {"wrapped": await call_next(ctx)}
            finally:
                events.append(("outer out", ctx.job_name))

        @app.middleware
        async def inner(ctx: JobContext, call_next: Any) -> Any:
            events.append(("inner in", ctx.job_name))
            return await call_next(ctx)

        @app.job(name="ok")
        async def ok() -> int:
            events.append(("handler", "ok"))
            return 1

        @app.job(name="bad", retries=0)
        def bad() -> None:
            events.append(("handler", "bad"))
            raise ValueError("nope")

        try:
            await app.setup()
            good = await app.enqueue(ok)
            await drain(app)
            row = await app.get_job(good)
            assert row is not None
            assert row["status"] == "done"
            assert row["result"] == {"wrapped": 1}  # what the outermost middleware returned
            assert events == [
                ("before", "ok", 1),
                ("outer in", "ok"),
                ("inner in", "ok"),
                ("handler", "ok"),
                ("outer out", "ok"),
                ("after", "ok"),
            ]
            assert "hook bug" in caplog.text
            events.clear()
            failed = await app.enqueue(bad)
            await drain(app)
            assert await app.dead_letter.get(failed) is not None
            assert events[:4] == [("before", "bad", 1), ("outer in", "bad"), ("inner in", "bad"), ("handler", "bad")]
            assert events[4] == ("outer out", "bad")
            assert events[5][:2] == ("error", "bad")
            assert "nope" in events[5][2]
            assert events[5][3] == 1
            assert ("after", "bad") not in events
        finally:
            await app.close()

    with caplog.at_level(logging.ERROR, logger="soniq.hooks"):
        asyncio.run(main())


def test_middleware_must_be_async_and_hooks_callable() -> None:
    app = Soniq("memory://", observers="")
    with pytest.raises(TypeError, match="async"):
        app.middleware(lambda ctx, call_next: None)
    with pytest.raises(TypeError, match="before_job"):
        app.before_job("not a function")  # type: ignore[arg-type]


def test_a_plain_app_puts_nothing_on_the_job_path() -> None:
    app = Soniq("memory://", observers="")
    assert not app.bus.wants_job_events
    assert not app.bus.defers
    app.after_job(lambda name, job_id, ms: None)
    assert app.bus.wants_job_events
    assert app.bus.defers


# -- metrics sinks written for 0.1.0 (async, its keywords) --------------------------------


class LegacyAsyncSink:
    def __init__(self) -> None:
        self.starts: list[dict[str, Any]] = []
        self.ends: list[dict[str, Any]] = []

    async def record_job_start(self, *, job_id: str, job_name: str, queue: str, attempt: int) -> None:
        await asyncio.sleep(0)
        self.starts.append({"job_id": job_id, "job_name": job_name, "attempt": attempt})

    async def record_job_end(
        self, *, job_id: str, job_name: str, queue: str, status: str, duration_s: float, error: str | None = None
    ) -> None:
        await asyncio.sleep(0)
        if job_name == "explodes":
            raise RuntimeError("sink bug")
        self.ends.append({"job_id": job_id, "status": status, "error": error, "duration_s": duration_s})


def test_async_0_1_0_metrics_sink_is_awaited(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        sink = LegacyAsyncSink()
        app = store.app(metrics_sink=sink)

        @app.job(name="fine")
        async def fine() -> None: ...

        @app.job(name="fails", retries=0)
        async def fails() -> None:
            raise RuntimeError("boom")

        @app.job(name="explodes")
        async def explodes() -> None: ...

        try:
            await app.setup()
            a = await app.enqueue(fine)
            b = await app.enqueue(fails)
            c = await app.enqueue(explodes)
            await drain(app)
            # Awaited in each job's task, so every call has finished when the worker has.
            assert len(sink.starts) == 3
            assert len(sink.ends) == 2
            ends = {end["job_id"]: end for end in sink.ends}
            assert ends[a]["status"] == "done"
            assert ends[a]["error"] is None
            assert ends[a]["duration_s"] >= 0
            assert ends[b]["status"] == "dead_letter"
            assert "boom" in ends[b]["error"]
            assert {start["job_id"]: start["attempt"] for start in sink.starts} == {a: 1, b: 1, c: 1}
            row = await app.get_job(c)
            assert row is not None
            assert row["status"] == "done"
            assert "sink bug" in caplog.text
        finally:
            await app.close()

    with caplog.at_level(logging.ERROR, logger="soniq.metrics"):
        asyncio.run(main())


# -- unique on the decorator: the job's default for enqueue (the store side is tested on its own) ----


def _store_dedupes(app: Soniq) -> bool:
    """Whether the backend's package has the store side of deduplication; a backend without it
    stores every enqueue under its own id."""
    package = Path(sys.modules[type(app.backend).__module__].__file__ or "").parent
    return any("dedup_key" in path.read_text(errors="replace") for path in package.rglob("*") if path.is_file())


def test_decorator_unique_is_the_enqueue_default(store: Store) -> None:
    async def main() -> None:
        app = store.app()
        if not _store_dedupes(app):
            pytest.skip(f"{store.kind}: the store side of unique/dedup_key is not merged into this tree yet")

        @app.job(name="sync_account", unique=True)
        async def sync_account(account_id: int) -> None: ...

        try:
            await app.setup()
            first = await sync_account.enqueue(account_id=1)  # type: ignore[attr-defined]
            again = await sync_account.enqueue(account_id=1)  # type: ignore[attr-defined]
            other = await sync_account.enqueue(account_id=2)  # type: ignore[attr-defined]
            forced = await sync_account.options(unique=False).enqueue(account_id=1)  # type: ignore[attr-defined]
            keyed = await sync_account.options(dedup_key="acct-9").enqueue(account_id=9)  # type: ignore[attr-defined]
            keyed_again = await sync_account.options(dedup_key="acct-9").enqueue(account_id=10)  # type: ignore[attr-defined]
            assert again == first
            assert len({first, other, forced, keyed}) == 4
            assert keyed_again == keyed
            assert (await app.get_queue_stats())["queued"] == 4
        finally:
            await app.close()

    asyncio.run(main())


class HangingSink:
    async def record_job_start(self, *, job_id: str, job_name: str, queue: str, attempt: int) -> None:
        await asyncio.Event().wait()  # never returns

    def record_job_end(self, *, job_id: str, job_name: str, queue: str, outcome: str, duration: float) -> None:
        pass


def test_a_hanging_async_sink_call_is_abandoned_after_its_bound(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import soniq.compat.metrics

    monkeypatch.setattr(soniq.compat.metrics, "SINK_CALL_TIMEOUT", 0.1)

    async def main() -> None:
        app = Soniq("memory://", metrics_sink=HangingSink(), **FAST)

        @app.job(name="quick")
        async def quick() -> str:
            return "ran"

        try:
            job_id = await app.enqueue(quick)
            await drain(app)
            row = await app.get_job(job_id)
            assert row is not None
            assert row["status"] == "done"
            assert row["result"] == "ran"
            assert "did not finish within 0.1s" in caplog.text
        finally:
            await app.close()

    with caplog.at_level(logging.ERROR, logger="soniq.metrics"):
        asyncio.run(main())


def test_snooze_max_seconds_is_a_checked_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from soniq import SettingsError

    assert Soniq("memory://", observers="").settings.snooze_max_seconds == 30 * 86400
    for bad in (0, -1, "soon", float("inf")):
        with pytest.raises(SettingsError, match="snooze_max_seconds"):
            Soniq("memory://", observers="", snooze_max_seconds=bad)
    monkeypatch.setenv("SONIQ_SNOOZE_MAX_SECONDS", "60")
    assert Soniq("memory://", observers="").settings.snooze_max_seconds == 60.0
