"""Unique windows (`unique_for=`) and debounce (`debounce=`, `debounce_max_wait=`) through the app,
on memory, SQLite and PostgreSQL; the options refused where they enter; the key each derives."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soniq import BackendCapabilities, JobOptionsError, Soniq
from soniq.errors import MissingBackendRoleError
from soniq.windows import DEFAULT_MAX_WAIT_FACTOR, MAX_WINDOW_SECONDS, KeyTiming, timing_key
from soniq_memory import MemoryBackend

on_stores = pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"], indirect=True)


async def run_once(app: Soniq) -> None:
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)


async def count_rows(app: Soniq, job_name: str) -> int:
    return sum(1 for row in await app.list_jobs(limit=500) if row["job_name"] == job_name)


# -- unique windows ---------------------------------------------------------------------


@on_stores
@pytest.mark.asyncio
async def test_a_window_keeps_one_job_per_key_whatever_it_became(make_app: Callable[..., Soniq]) -> None:
    app = make_app()
    ran: list[int] = []

    @app.job(unique_for=3600)
    async def report(day: int) -> None:
        ran.append(day)

    first = await app.enqueue(report, day=1)
    assert await app.enqueue(report, day=1) == first
    other = await app.enqueue(report, day=2)  # another key: its own window
    assert other != first
    await run_once(app)
    assert sorted(ran) == [1, 2]
    assert (await app.get_job(first) or {})["status"] == "done"
    # Finished, and still inside its window: nothing is stored, the holder's id comes back.
    assert await app.enqueue(report, day=1) == first
    await run_once(app)
    assert sorted(ran) == [1, 2]


@on_stores
@pytest.mark.asyncio
async def test_a_cancelled_holder_still_holds_its_window_and_dedup_key_names_it(
    make_app: Callable[..., Soniq],
) -> None:
    app = make_app()

    @app.job()
    async def sync_account(account: str, full: bool = False) -> None:
        return None

    held = await app.enqueue(sync_account, account="a", unique_for=600, dedup_key="sync:a")
    assert await app.cancel_job(held)
    again = await app.enqueue(sync_account, account="a", full=True, unique_for=600, dedup_key="sync:a")
    assert again == held  # the key is dedup_key's, whatever the arguments
    row = await app.get_job(held)
    assert row is not None
    assert row["status"] == "cancelled"


@on_stores
@pytest.mark.asyncio
async def test_a_window_ends_and_the_next_enqueue_takes_the_key(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any]
) -> None:
    app = make_app()

    @app.job(unique_for=0.4)
    async def ping() -> None:
        return None

    started = datetime.now(UTC)
    first = await app.enqueue(ping)

    async def a_new_one() -> str | None:
        job_id = await app.enqueue(ping)
        return job_id if job_id != first else None

    second = await wait_until(a_new_one, timeout=10, interval=0.02)
    assert datetime.now(UTC) - started >= timedelta(seconds=0.4)  # never before the window ended
    assert await app.enqueue(ping) == second  # the new window is the new job's


@on_stores
@pytest.mark.asyncio
async def test_defaults_are_part_of_the_key(make_app: Callable[..., Soniq]) -> None:
    app = make_app()

    @app.job(unique_for=600)
    async def resize(image: str, width: int = 100) -> None:
        return None

    first = await app.enqueue(resize, image="a.png")
    assert await app.enqueue(resize, image="a.png", width=100) == first
    assert await app.enqueue(resize, image="a.png", width=200) != first


@on_stores
@pytest.mark.asyncio
async def test_enqueue_many_gives_repeats_in_one_call_the_first_ones_id(make_app: Callable[..., Soniq]) -> None:
    app = make_app()

    @app.job(unique_for=600)
    async def touch(n: int) -> None:
        return None

    ids = await app.enqueue_many(touch, [{"n": 1}, {"n": 2}, {"n": 1}])
    assert ids[0] == ids[2]
    assert len(set(ids)) == 2
    again = await app.enqueue_many(touch, [{"n": 2}, {"n": 3}])
    assert again[0] == ids[1]
    assert again[1] not in ids
    assert await app.enqueue(touch, n=3) == again[1]


# -- debounce ------------------------------------------------------------------------------


@on_stores
@pytest.mark.asyncio
async def test_a_repeat_replaces_the_arguments_and_pushes_the_start(make_app: Callable[..., Soniq]) -> None:
    app = make_app()
    seen: list[str] = []

    @app.job(debounce=30, debounce_max_wait=45)
    async def reindex(doc: str, note: str = "") -> None:
        seen.append(note)

    before = datetime.now(UTC)
    first = await app.enqueue(reindex, doc="d1", dedup_key="reindex:d1", note="one")
    row = await app.get_job(first)
    assert row is not None
    start_one = row["scheduled_at"]
    assert before + timedelta(seconds=30) <= start_one <= datetime.now(UTC) + timedelta(seconds=30)
    second = await app.enqueue(reindex, doc="d1", dedup_key="reindex:d1", note="two")
    assert second == first
    row = await app.get_job(first)
    assert row is not None
    assert row["args"] == {"doc": "d1", "note": "two"}
    assert row["scheduled_at"] >= start_one
    assert row["scheduled_at"] <= before + timedelta(seconds=45) + timedelta(seconds=1)
    assert await count_rows(app, row["job_name"]) == 1


@on_stores
@pytest.mark.asyncio
async def test_the_start_never_passes_the_first_enqueue_plus_the_max_wait(make_app: Callable[..., Soniq]) -> None:
    app = make_app()

    @app.job()
    async def flush(batch: int) -> None:
        return None

    before = datetime.now(UTC)
    job_id = await app.enqueue(flush, batch=0, debounce=60, debounce_max_wait=61, dedup_key="flush")
    row = await app.get_job(job_id)
    assert row is not None
    deadline_bound = before + timedelta(seconds=61)
    for batch in range(1, 4):
        await asyncio.sleep(0.5)  # time passes on purpose: each repeat would push past the deadline
        assert await app.enqueue(flush, batch=batch, debounce=60, debounce_max_wait=61, dedup_key="flush") == job_id
    row = await app.get_job(job_id)
    assert row is not None
    assert row["args"] == {"batch": 3}
    assert row["scheduled_at"] <= deadline_bound + timedelta(milliseconds=50)
    assert row["scheduled_at"] >= before + timedelta(seconds=60)


@on_stores
@pytest.mark.asyncio
async def test_a_debounced_job_runs_once_with_the_latest_arguments_and_a_later_enqueue_is_new(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any]
) -> None:
    app = make_app()
    seen: list[int] = []

    @app.job(debounce=0.3)
    async def recount(value: int) -> None:
        seen.append(value)

    first = await app.enqueue(recount, value=1, dedup_key="recount")
    for value in (2, 3):
        assert await app.enqueue(recount, value=value, dedup_key="recount") == first

    async def ran() -> bool:
        await run_once(app)
        return bool(seen)

    await wait_until(ran, timeout=10)
    assert seen == [3]
    after = await app.enqueue(recount, value=4, dedup_key="recount")
    assert after != first  # the first one ran: this is a new queued job


# -- refused where they enter ---------------------------------------------------------------

bad_seconds = st.one_of(
    st.just(0),
    st.floats(max_value=0, allow_nan=False),
    st.sampled_from([math.nan, math.inf, -math.inf, True, False, "10", [1]]),
    st.floats(min_value=MAX_WINDOW_SECONDS + 1, allow_infinity=False, allow_nan=False),
)


@given(value=bad_seconds, option=st.sampled_from(["unique_for", "debounce"]))
@settings(max_examples=60, deadline=None)
def test_a_bad_window_or_delay_is_refused_at_decoration_naming_the_option(value: Any, option: str) -> None:
    app = Soniq(backend=MemoryBackend())
    with pytest.raises(JobOptionsError, match=option):

        @app.job(**{option: value})
        async def job() -> None:
            return None

    assert app.registry.names() == []


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"unique_for": 10, "debounce": 5}, "cannot be combined"),
        ({"debounce_max_wait": 5}, "needs debounce"),
        ({"debounce": 10, "debounce_max_wait": 5}, "at least debounce"),
    ],
)
def test_options_that_contradict_each_other_are_refused(options: dict[str, Any], words: str) -> None:
    with pytest.raises(JobOptionsError, match=words):
        KeyTiming.of(**options)


@pytest.mark.asyncio
async def test_an_enqueue_refuses_debounce_with_a_start_or_dependencies_and_stores_nothing() -> None:
    app = Soniq(backend=MemoryBackend())

    @app.job()
    async def job(n: int = 0) -> None:
        return None

    with pytest.raises(JobOptionsError, match="scheduled_at"):
        await app.enqueue(job, debounce=5, scheduled_at=60)
    parent = await app.enqueue(job)
    with pytest.raises(JobOptionsError, match="depends_on"):
        await app.enqueue(job, unique_for=5, depends_on=parent)
    with pytest.raises(JobOptionsError, match="debounce_max_wait"):
        await app.enqueue(job, n=1, debounce=5, debounce_max_wait=-1)
    assert [row["id"] for row in await app.list_jobs()] == [parent]
    await app.close()


def test_without_a_max_wait_the_deadline_is_ten_debounce_periods() -> None:
    timing = KeyTiming.of(debounce=2)
    assert timing.debounce_max_wait == 2 * DEFAULT_MAX_WAIT_FACTOR


class WithoutWindows(MemoryBackend):
    @property
    def capabilities(self) -> BackendCapabilities:
        roles = {k: v for k, v in super().capabilities.roles.items() if k not in ("UniqueWindows", "DebouncedJobs")}
        return dataclasses.replace(super().capabilities, roles=roles)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("options", "role"), [({"unique_for": 5}, "UniqueWindows"), ({"debounce": 5}, "DebouncedJobs")]
)
async def test_a_backend_without_the_role_refuses_naming_it(options: dict[str, Any], role: str) -> None:
    app = Soniq(backend=WithoutWindows())

    @app.job()
    async def job() -> None:
        return None

    with pytest.raises(MissingBackendRoleError) as caught:
        await app.enqueue(job, **options)
    assert caught.value.role == role
    assert await app.list_jobs() == []
    await app.close()


# -- the key -----------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
argument_maps = st.dictionaries(st.text(min_size=1, max_size=6), json_values, max_size=4)


@given(first=argument_maps, second=argument_maps)
@settings(max_examples=100, deadline=None)
def test_keys_are_equal_exactly_when_the_arguments_are(first: dict[str, Any], second: dict[str, Any]) -> None:
    timing = KeyTiming.of(unique_for=10)
    one = timing_key(timing, "job", first, dedup_key=None, signature=None)
    two = timing_key(timing, "job", dict(reversed(list(second.items()))), dedup_key=None, signature=None)
    assert (one == two) == (first == second)
    assert one.startswith("window:job:")
    assert timing_key(timing, "job", first, dedup_key="mine", signature=None) == "mine"
    debounced = timing_key(KeyTiming.of(debounce=1), "job", first, dedup_key=None, signature=None)
    assert debounced.startswith("debounce:job:")
