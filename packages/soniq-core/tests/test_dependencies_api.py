"""Job dependencies as producers use them: `depends_on` / `dependency_policy` on
`enqueue`, `enqueue_many` and `fn.options`, `fn.call` / `JobCall`, and `app.chain`.

Real memory and SQLite stores; what a user sees: the rows' `depends_on`, `waiting_on`,
`dependency_policy` and status, and nothing stored when core or the store refuses the call.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from soniq import (
    DependencyCycleError,
    DependencyPolicy,
    JobCall,
    JobOptionsError,
    Soniq,
    UnknownDependencyError,
)
from soniq.dependencies import check_batch, normalize_depends_on
from soniq.records import NewJob


@pytest_asyncio.fixture(params=["memory", "sqlite"])
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Soniq]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'deps.db'}"
    made = Soniq(url, observers="", poll_interval=0.05)
    ran: list[str] = []
    made.ran = ran  # type: ignore[attr-defined]

    @made.job(name="step")
    async def step(label: str) -> str:
        ran.append(label)
        return label

    @made.job(name="fails", max_retries=0)
    async def fails() -> None:
        raise RuntimeError("boom")

    yield made
    await made.close()


async def row(app: Soniq, job_id: str) -> dict[str, Any]:
    found = await app.get_job(job_id)
    assert found is not None, job_id
    return found


async def run_until_idle(app: Soniq, rounds: int = 10) -> None:
    """Run the worker until a pass finds nothing due (each pass may unblock the next job)."""
    for _ in range(rounds):
        summary = await app.run_worker(run_once=True, install_signal_handlers=False)
        if not summary.processed:
            return
        queued = await app.list_jobs(status="queued")
        if not queued or all(r["waiting_on"] for r in queued):
            return


def test_depends_on_takes_one_id_or_many_and_keeps_each_once() -> None:
    same = uuid.uuid4()
    assert normalize_depends_on(None) == ()
    assert normalize_depends_on("a") == ("a",)
    assert normalize_depends_on(["b", "a", "b", str(same), same]) == ("b", "a", str(same))
    assert normalize_depends_on(iter(["x"])) == ("x",)
    for bad in ([""], [3], b"ab", {"a": 1}, 7):
        with pytest.raises(JobOptionsError, match="depends_on"):
            normalize_depends_on(bad)  # type: ignore[arg-type]


def test_a_batch_can_never_store_a_cycle() -> None:
    def job(job_id: str, *deps: str) -> NewJob:
        return NewJob(
            id=job_id,
            job_name="step",
            args={},
            queue="default",
            priority=100,
            scheduled_at=datetime.now(UTC),
            max_attempts=1,
            depends_on=deps,
        )

    check_batch([job("a"), job("b", "a"), job("c", "a", "b", "stored-elsewhere")])
    with pytest.raises(DependencyCycleError, match="cannot depend on itself"):
        check_batch([job("a", "a")])
    with pytest.raises(DependencyCycleError, match="comes after it"):
        check_batch([job("a", "b"), job("b", "a")])
    with pytest.raises(DependencyCycleError, match="appears twice"):
        check_batch([job("a"), job("a", "x")])


@pytest.mark.asyncio
async def test_a_dependent_is_stored_waiting_with_its_dependencies_and_policy(app: Soniq) -> None:
    first = await app.enqueue("step", label="first")
    second = await app.enqueue("step", label="second")
    waiting = await app.enqueue("step", label="after", depends_on=[first, second, first], dependency_policy="run")
    stored = await row(app, waiting)
    assert stored["depends_on"] == [first, second]
    assert stored["waiting_on"] == 2
    assert stored["dependency_policy"] == "run"
    assert stored["status"] == "queued"
    alone = await row(app, await app.enqueue("step", label="alone", depends_on=first))
    assert (alone["depends_on"], alone["waiting_on"], alone["dependency_policy"]) == ([first], 1, "cancel")
    plain = await row(app, first)
    assert (plain["depends_on"], plain["waiting_on"]) == ([], 0)


@pytest.mark.asyncio
async def test_enqueue_many_and_options_take_the_same_dependencies(app: Soniq) -> None:
    first = await app.enqueue("step", label="first")
    ids = await app.enqueue_many("step", [{"label": "a"}, {"label": "b"}], depends_on=first)
    step = app.registry.require("step").func
    via_options = await step.options(depends_on=[first], dependency_policy=DependencyPolicy.RUN).enqueue(label="c")
    for job_id in ids:
        assert (await row(app, job_id))["depends_on"] == [first]
    assert (await row(app, via_options))["dependency_policy"] == "run"


@pytest.mark.asyncio
async def test_bad_dependencies_store_nothing(app: Soniq) -> None:
    first = await app.enqueue("step", label="first")
    with pytest.raises(UnknownDependencyError) as caught:
        await app.enqueue("step", label="x", depends_on=[first, "no-such-job"])
    assert caught.value.missing == ("no-such-job",)
    with pytest.raises(UnknownDependencyError):
        await app.enqueue_many("step", [{"label": "y"}, {"label": "z"}], depends_on="missing-too")
    with pytest.raises(JobOptionsError, match="dependency_policy must be one of"):
        await app.enqueue("step", label="x", depends_on=first, dependency_policy="ignore")
    with pytest.raises(JobOptionsError, match="depends_on"):
        await app.enqueue("step", label="x", depends_on=[first, 42])
    assert [r["id"] for r in await app.list_jobs()] == [first]


@pytest.mark.asyncio
async def test_a_chain_is_one_insert_where_each_step_waits_for_the_one_before(app: Soniq) -> None:
    step = app.registry.require("step").func
    ids = await app.chain(
        step.call(label="fetch"),
        JobCall("step", {"label": "parse"}),
        step.options(queue="reports", priority=5).call(label="report"),
    )
    assert len(set(ids)) == 3
    rows = [await row(app, job_id) for job_id in ids]
    assert [r["depends_on"] for r in rows] == [[], [ids[0]], [ids[1]]]
    assert [r["waiting_on"] for r in rows] == [0, 1, 1]
    assert {r["dependency_policy"] for r in rows} == {"cancel"}
    assert (rows[2]["queue"], rows[2]["priority"]) == ("reports", 5)
    assert [r["args"]["label"] for r in rows] == ["fetch", "parse", "report"]
    assert await app.chain(step.call(label="single"))
    assert len(await app.list_jobs()) == 4


@pytest.mark.asyncio
async def test_a_chain_with_a_bad_step_stores_nothing(app: Soniq) -> None:
    step = app.registry.require("step").func
    with pytest.raises(JobOptionsError, match="unexpected 'lable'"):
        await app.chain(step.call(label="ok"), step.call(lable="typo"))
    with pytest.raises(TypeError, match="item 1 is str"):
        await app.chain(step.call(label="ok"), "step")  # type: ignore[arg-type]
    with pytest.raises(JobOptionsError, match="at least one call"):
        await app.chain()
    with pytest.raises(TypeError, match="queue, priority and scheduled_at only"):
        step.options(unique=True).call(label="x")
    assert await app.list_jobs() == []


@pytest.mark.asyncio
async def test_a_chain_runs_in_order(app: Soniq) -> None:
    step = app.registry.require("step").func
    ids = await app.chain(*(step.call(label=str(n)) for n in range(4)))
    await run_until_idle(app)
    assert app.ran == ["0", "1", "2", "3"]  # type: ignore[attr-defined]
    assert [(await row(app, job_id))["status"] for job_id in ids] == ["done"] * 4


@pytest.mark.asyncio
async def test_a_failed_step_cancels_the_rest_of_its_chain(app: Soniq) -> None:
    step = app.registry.require("step").func
    ids = await app.chain(JobCall("fails"), step.call(label="never"), step.call(label="never either"))
    await run_until_idle(app)
    assert (await app.get_job(ids[0]))["status"] == "dead_letter"  # type: ignore[index]
    later = [await row(app, job_id) for job_id in ids[1:]]
    assert [r["status"] for r in later] == ["cancelled", "cancelled"]
    assert later[0]["last_error"] == f"dependency {ids[0]} was dead-lettered"
    assert app.ran == []  # type: ignore[attr-defined]
