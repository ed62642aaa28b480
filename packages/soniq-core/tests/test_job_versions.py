"""Job versions: `@app.job(version=N, upgrades={old: fn})`, upgrade chains and dead letters."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import soniq_memory.backend as memory_backend
from soniq import BaseObserver, JobOptionsError, JobOutcome, Soniq, TaskRef, task_ref
from soniq.errors import MissingBackendRoleError
from soniq.observers import JobEndEvent
from soniq.records import JobRecord
from soniq.registry import JobDefinition
from soniq.worker._runs import JobRun
from soniq.worker.executor import REASON_NEWER_VERSION, bring_to_version

on_stores = pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"], indirect=True)


def same(args: dict[str, Any]) -> dict[str, Any]:
    return args


async def run_once(app: Soniq) -> None:
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)


async def settle(app: Soniq, wait_until: Callable[..., Any], job_id: str, *statuses: str) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        await run_once(app)
        row = await app.get_job(job_id)
        return row if row is not None and row["status"] in statuses else None

    row: dict[str, Any] = await wait_until(reached, timeout=20)
    return row


# -- decoration ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, -1, True, False, 1.0, "2", None, 10_001])
def test_a_bad_version_is_refused_at_decoration(version: Any) -> None:
    app = Soniq("memory://")
    with pytest.raises(JobOptionsError, match="version"):

        @app.job(name="v", version=version)
        def v() -> None: ...

    assert app.registry.get("v") is None


@pytest.mark.parametrize(
    ("version", "upgrades", "words"),
    [
        (3, {1: same}, "gap"),  # 2->3 missing
        (4, {1: same, 3: same}, "2->3"),
        (2, {2: same}, "upgrades keys"),
        (2, {0: same}, "upgrades keys"),
        (2, {True: same}, "upgrades keys"),
        (2, {"1": same}, "upgrades keys"),
        (2, {1: "not callable"}, "upgrades[1]"),
        (2, [same], "upgrades must be a dict"),
        (1, {1: same}, "upgrades keys"),
    ],
)
def test_bad_upgrades_are_refused_at_decoration(version: int, upgrades: Any, words: str) -> None:
    app = Soniq("memory://")
    with pytest.raises(JobOptionsError, match="upgrades") as caught:

        @app.job(name="u", version=version, upgrades=upgrades)
        def u() -> None: ...

    assert words in str(caught.value)
    assert app.registry.get("u") is None


@settings(max_examples=150, deadline=None)
@given(
    version=st.integers(min_value=1, max_value=12),
    keys=st.sets(st.integers(min_value=-2, max_value=14), max_size=8),
)
def test_an_upgrade_chain_is_accepted_exactly_when_it_is_contiguous_up_to_the_version(
    version: int, keys: set[int]
) -> None:
    app = Soniq("memory://")
    good = all(1 <= key < version for key in keys) and (not keys or keys == set(range(min(keys), version)))
    decorate = app.job(name="chain", version=version, upgrades=dict.fromkeys(keys, same))
    if good:
        decorate(same)
        definition = app.registry.require("chain")
        assert definition.version == version
        assert set(definition.upgrades) == (keys if version > 1 else set())
    else:
        with pytest.raises(JobOptionsError):
            decorate(same)


def test_task_ref_version_is_checked() -> None:
    assert TaskRef("x").version == 1
    assert task_ref(name="x", version=3).version == 3
    bads: tuple[Any, ...] = (0, True, "2", 10_001)
    for bad in bads:
        with pytest.raises(JobOptionsError, match="version"):
            TaskRef("x", version=bad)


# -- enqueue ---------------------------------------------------------------------------------


@on_stores
@pytest.mark.asyncio
async def test_rows_carry_the_version_of_the_code_that_enqueued_them(make_app: Callable[..., Soniq]) -> None:
    app = make_app()

    @app.job(name="report", version=3, upgrades={1: same, 2: same})
    async def report() -> None: ...

    @app.job(name="plain")
    async def plain() -> None: ...

    rows = [await app.get_job(await app.enqueue(fn)) for fn in (report, plain)]
    assert [row["version"] for row in rows if row is not None] == [3, 1]
    remote = await app.get_job(await app.enqueue(TaskRef("elsewhere.job", version=5)))
    assert remote is not None
    assert remote["version"] == 5
    default = await app.get_job(await app.enqueue(task_ref(name="elsewhere.other")))
    assert default is not None
    assert default["version"] == 1


@pytest.mark.asyncio
async def test_a_backend_without_versioned_jobs_refuses_a_version_above_one(fast_settings: dict[str, Any]) -> None:
    app = Soniq("minimal://", **fast_settings)
    try:

        @app.job(name="v2", version=2, upgrades={1: same})
        async def v2() -> None: ...

        @app.job(name="v1")
        async def v1() -> None: ...

        with pytest.raises(MissingBackendRoleError, match="VersionedJobs"):
            await app.enqueue(v2)
        with pytest.raises(MissingBackendRoleError, match="VersionedJobs"):
            await app.enqueue(TaskRef("remote", version=2))
        assert await app.enqueue(v1)
    finally:
        await app.close()


# -- workers ---------------------------------------------------------------------------------


@on_stores
@pytest.mark.asyncio
async def test_an_older_row_is_upgraded_step_by_step_before_the_handler_runs(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any]
) -> None:
    old_app, new_app = make_app(), make_app()
    seen: list[Any] = []

    @old_app.job(name="greet")
    async def greet_v1(name: str) -> None: ...

    def one_to_two(args: dict[str, Any]) -> dict[str, Any]:
        return {"full_name": args["name"], "steps": ["1->2"]}

    def two_to_three(args: dict[str, Any]) -> dict[str, Any]:
        return {**args, "greeting": "hello", "steps": [*args["steps"], "2->3"]}

    @new_app.job(name="greet", version=3, upgrades={1: one_to_two, 2: two_to_three})
    async def greet_v3(full_name: str, greeting: str, steps: list[str]) -> str:
        seen.append((full_name, greeting, steps))
        return f"{greeting} {full_name}"

    @new_app.job(name="greet_sync", version=2, upgrades={1: lambda a: {"n": a["n"] * 10}})
    def greet_sync(n: int) -> int:  # a plain (no context, no model) sync job takes the same path
        return n + 1

    job_id = await old_app.enqueue(greet_v1, name="Ada")
    sync_id = await old_app.enqueue(TaskRef("greet_sync"), n=4)  # old_app has no greet_sync: a version-1 row
    row = await settle(new_app, wait_until, job_id, "done")
    assert row["result"] == "hello Ada"
    assert seen == [("Ada", "hello", ["1->2", "2->3"])]
    sync_row = await settle(new_app, wait_until, sync_id, "done")
    assert sync_row["result"] == 41


@on_stores
@pytest.mark.asyncio
async def test_a_row_no_chain_reaches_is_dead_lettered_no_upgrade_path(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any]
) -> None:
    producer, worker_app = make_app(), make_app()
    ran: list[str] = []

    @worker_app.job(name="invoice", version=3, upgrades={2: same})
    async def invoice(**args: Any) -> None:
        ran.append("invoice")

    @worker_app.job(name="other")
    async def other() -> str:
        ran.append("other")
        return "ok"

    job_id = await producer.enqueue(TaskRef("invoice"), amount=5)  # a version-1 row
    other_id = await producer.enqueue(TaskRef("other"))
    row = await settle(worker_app, wait_until, job_id, "dead_letter")
    assert row["dead_letter_reason"] == "no_upgrade_path"
    assert "version-1 row" in row["last_error"]
    assert "version 3" in row["last_error"]
    assert "2->3" in row["last_error"]
    assert row["attempts"] == 1
    assert ran == ["other"]
    done = await app_row(worker_app, other_id)
    assert done["status"] == "done"


async def app_row(app: Soniq, job_id: str) -> dict[str, Any]:
    row = await app.get_job(job_id)
    assert row is not None
    return row


@on_stores
@pytest.mark.parametrize("failure", ["raises", "not a dict", "not json"])
@pytest.mark.asyncio
async def test_an_upgrade_that_fails_dead_letters_upgrade_failed(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any], failure: str
) -> None:
    producer, worker_app = make_app(), make_app()
    ran: list[int] = []

    def broken(args: dict[str, Any]) -> Any:
        if failure == "raises":
            raise KeyError("customer_id")
        if failure == "not a dict":
            return [args]
        return {"when": object()}

    @worker_app.job(name="ship", version=2, upgrades={1: broken}, max_retries=5)
    async def ship(**args: Any) -> None:
        ran.append(1)

    job_id = await producer.enqueue(TaskRef("ship"), order=1)
    row = await settle(worker_app, wait_until, job_id, "dead_letter")
    assert row["dead_letter_reason"] == "upgrade_failed"
    assert "upgrade 1->2" in row["last_error"]
    expected = {"raises": "KeyError", "not a dict": "not a dict", "not json": "not JSON"}[failure]
    assert expected in row["last_error"]
    assert ran == []


@on_stores
@pytest.mark.asyncio
async def test_a_newer_row_is_left_for_a_worker_that_has_its_code(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any]
) -> None:
    new_app, old_app = make_app(), make_app()
    ran: list[str] = []

    @new_app.job(name="resize", version=2, upgrades={1: same})
    async def resize_v2(size: int) -> str:
        ran.append("v2")
        return "v2"

    @old_app.job(name="resize")
    async def resize_v1(size: int) -> str:
        ran.append("v1")
        return "v1"

    @old_app.job(name="ping")
    async def ping() -> str:
        return "pong"

    job_id = await new_app.enqueue(resize_v2, size=3)
    ping_id = await old_app.enqueue(ping)
    await settle(old_app, wait_until, ping_id, "done")
    await run_once(old_app)
    row = await app_row(old_app, job_id)
    assert (row["status"], row["attempts"], row["version"]) == ("queued", 0, 2)
    assert ran == []
    done = await settle(new_app, wait_until, job_id, "done")
    assert done["result"] == "v2"
    assert ran == ["v2"]


def _record(version: int, **args: Any) -> JobRecord:
    from datetime import UTC, datetime

    from soniq.records import JobStatus

    now = datetime.now(UTC)
    return JobRecord(
        id="j1",
        job_name="n",
        args=args,
        status=JobStatus.PROCESSING,
        queue="default",
        priority=100,
        attempts=0,
        max_attempts=3,
        scheduled_at=now,
        created_at=now,
        updated_at=now,
        last_error=None,
        worker_id="w",
        result=None,
        version=version,
    )


def test_a_newer_row_on_a_backend_that_does_not_filter_is_handed_back() -> None:
    definition = JobDefinition(
        name="n", func=same, queue="default", max_retries=2, priority=100, timeout=None, is_async=False
    )
    run = JobRun(job=_record(2, a=1), definition=definition)
    outcome = bring_to_version(run, definition)
    assert outcome is not None
    assert outcome.hand_back is not None
    assert outcome.hand_back_reason == REASON_NEWER_VERSION
    assert "version 2" in outcome.hand_back
    assert "version 1" in outcome.hand_back
    assert run.job.version == 2
    assert run.job.args == {"a": 1}


@pytest.mark.asyncio
async def test_a_worker_on_a_backend_that_does_not_filter_hands_a_newer_row_back(
    fast_settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    new_app = Soniq("memory://newer-row", **fast_settings)

    @new_app.job(name="resize", version=2, upgrades={1: same})
    async def resize_v2(size: int) -> None: ...

    job_id = await new_app.enqueue(resize_v2, size=1)
    # From here on the store no longer says it filters by version: a version-1 worker claims the row.
    caps = memory_backend._CAPABILITIES
    roles = {name: v for name, v in caps.roles.items() if name != "VersionedJobs"}
    monkeypatch.setattr(memory_backend, "_CAPABILITIES", dataclasses.replace(caps, roles=roles))
    ends: list[JobEndEvent] = []

    class Ends(BaseObserver):
        def on_job_end(self, event: JobEndEvent) -> None:
            ends.append(event)

    old_app = Soniq("memory://newer-row", **fast_settings, extra_observers=[Ends()])
    ran: list[int] = []

    @old_app.job(name="resize")
    async def resize_v1(size: int) -> None:
        ran.append(size)

    stop = asyncio.Event()
    worker = asyncio.create_task(old_app.run_worker(shutdown_event=stop, install_signal_handlers=False))
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while not ends:
            assert asyncio.get_running_loop().time() < deadline, "no job end within 10s"
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        await asyncio.wait_for(worker, 20)
    assert ends[0].outcome is JobOutcome.NACKED
    assert ends[0].reason == REASON_NEWER_VERSION
    assert ran == []
    row = await app_row(new_app, job_id)
    assert (row["status"], row["attempts"], row["version"], row["shutdown_nacks"]) == ("queued", 0, 2, 0)
    assert "newer than the version 1 this worker runs" in caplog.text
    await old_app.close()
    await new_app.close()
