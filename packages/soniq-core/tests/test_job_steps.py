"""Resumable jobs: `ctx.step`, `ctx.checkpoint` and `ctx.last_checkpoint`, through real workers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from soniq import (
    InvalidStepNameError,
    JobContext,
    JobOwnershipLostError,
    JobStepError,
    Soniq,
    StepValueError,
    StepValueTooLargeError,
)
from soniq.errors import MissingBackendRoleError
from soniq.steps import MAX_STEP_NAME_CHARS, JobSteps, check_step_name

pytestmark = [pytest.mark.asyncio, pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"], indirect=True)]


async def drain(app: Soniq, wait_until: Callable[..., Any], job_id: str, status: str) -> dict[str, Any]:
    """Run the worker (run_once, again and again) until the job reaches `status`; return its row."""

    async def reached() -> dict[str, Any] | None:
        await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
        row = await app.get_job(job_id)
        return row if row is not None and row["status"] == status else None

    row: dict[str, Any] = await wait_until(reached, timeout=20)
    return row


async def test_a_completed_step_is_not_run_again_when_the_job_is_retried(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any]
) -> None:
    app = make_app()
    calls: list[str] = []
    runs: list[int] = []

    async def fetch(page: int) -> dict[str, Any]:
        calls.append(f"fetch {page}")
        return {"page": page, "rows": [1, 2, 3]}

    def total(rows: list[int]) -> int:  # a plain function runs in a thread
        calls.append("total")
        return sum(rows)

    @app.job(name="resumable", max_retries=2)
    async def resumable(ctx: JobContext) -> int:
        runs.append(ctx.attempt)
        fetched = await ctx.step("fetch", fetch, 7)
        if ctx.attempt == 1:
            raise RuntimeError("the network dropped after step 1")
        summed: int = await ctx.step("total", total, fetched["rows"])
        return summed

    job_id = await app.enqueue(resumable)
    row = await drain(app, wait_until, job_id, "done")
    assert runs == [1, 2]
    assert calls == ["fetch 7", "total"]  # the second run skipped "fetch"
    assert row["result"] == 6
    assert row["steps"] == {"fetch": {"page": 7, "rows": [1, 2, 3]}, "total": 6}


async def test_a_checkpoint_survives_a_retry_and_starts_as_none(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any]
) -> None:
    app = make_app()
    seen: list[Any] = []

    @app.job(name="paged", max_retries=1)
    async def paged(ctx: JobContext) -> str:
        seen.append(ctx.last_checkpoint)
        if ctx.last_checkpoint is None:
            await ctx.checkpoint({"cursor": "abc", "done": 40})
            assert ctx.last_checkpoint == {"cursor": "abc", "done": 40}
            raise RuntimeError("crashed after the checkpoint")
        await ctx.checkpoint({"cursor": "end", "done": 100})
        return "finished"

    job_id = await app.enqueue(paged)
    row = await drain(app, wait_until, job_id, "done")
    assert seen == [None, {"cursor": "abc", "done": 40}]
    assert row["checkpoint"] == {"cursor": "end", "done": 100}


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("empty name", "InvalidStepNameError"),
        ("long name", "InvalidStepNameError"),
        ("nul name", "InvalidStepNameError"),
        ("surrogate name", "InvalidStepNameError"),
        ("not a string", "InvalidStepNameError"),
        ("not json", "StepValueError"),
        ("nan", "StepValueError"),
        ("too large", "StepValueTooLargeError"),
        ("checkpoint too large", "StepValueTooLargeError"),
        ("checkpoint not json", "StepValueError"),
    ],
)
async def test_a_refused_step_fails_that_run_and_leaves_other_jobs_alone(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any], case: str, error: str
) -> None:
    app = make_app(max_result_bytes=256)

    async def value() -> Any:
        return {
            "not json": object(),
            "nan": float("nan"),
            "too large": "x" * 300,
        }.get(case, 1)

    @app.job(name="refused", max_retries=0)
    async def refused(ctx: JobContext) -> None:
        await ctx.step("good", value if case.endswith("name") else (lambda: "kept"))
        if case == "checkpoint too large":
            await ctx.checkpoint(["y" * 300])
        elif case == "checkpoint not json":
            await ctx.checkpoint({1j})
        else:
            name: Any = {
                "empty name": "",
                "long name": "n" * (MAX_STEP_NAME_CHARS + 1),
                "nul name": "a\x00b",
                "surrogate name": "a\udc80",
                "not a string": 42,
            }.get(case, "bad")
            await ctx.step(name, value)

    @app.job(name="bystander")
    async def bystander() -> str:
        return "fine"

    bad = await app.enqueue(refused)
    good = await app.enqueue(bystander)
    row = await drain(app, wait_until, bad, "dead_letter")
    assert row["dead_letter_reason"] == "max_attempts"
    assert error in row["last_error"]
    other = await app.get_job(good)
    assert other is not None
    assert (other["status"], other["result"]) == ("done", "fine")


async def test_a_worker_that_lost_the_row_cannot_write_a_step_or_a_checkpoint(make_app: Callable[..., Soniq]) -> None:
    app = make_app()

    @app.job(name="owned")
    async def owned() -> None:
        return None

    job_id = await app.enqueue(owned)
    backend = await app.connected_backend()
    # The row is queued, owned by no worker: every write is fenced off.
    steps = JobSteps(backend=backend, job_id=job_id, worker_id="a-worker-that-lost-it")
    called: list[int] = []

    def first() -> str:
        called.append(1)
        return "value"

    with pytest.raises(JobOwnershipLostError, match="no longer owns"):
        await steps.step("first", first)
    with pytest.raises(JobOwnershipLostError):
        await steps.checkpoint({"at": 1})
    assert called == [1]
    assert steps.last_checkpoint is None
    row = await app.get_job(job_id)
    assert row is not None
    assert row["steps"] == {}
    assert row["checkpoint"] is None


async def test_steps_outside_a_worker_keep_their_values_in_the_context(store: Any) -> None:
    ctx = JobContext(job_id="j", job_name="n", attempt=1, max_attempts=1, queue="q")
    calls: list[int] = []

    def once() -> int:
        calls.append(1)
        return 5

    assert await ctx.step("a", once) == 5
    assert await ctx.step("a", once) == 5
    assert calls == [1]
    assert ctx.last_checkpoint is None
    await ctx.checkpoint((1, 2))
    assert ctx.last_checkpoint == [1, 2]  # as JSON gives it back


async def test_a_backend_without_the_role_is_named(store: Any) -> None:
    class Bare:
        pass

    steps = JobSteps(backend=Bare(), job_id="j", worker_id="w")
    with pytest.raises(MissingBackendRoleError, match="JobStepStore") as caught:
        await steps.step("a", lambda: 1)
    assert "resumable steps" in str(caught.value)


async def test_step_name_rules(store: Any) -> None:
    assert check_step_name("n" * MAX_STEP_NAME_CHARS) == "n" * MAX_STEP_NAME_CHARS
    assert check_step_name("étape 1") == "étape 1"
    for bad in ("", "n" * (MAX_STEP_NAME_CHARS + 1), "a\x00", "\ud800", None, b"x"):
        with pytest.raises(InvalidStepNameError):
            check_step_name(bad)
    assert issubclass(StepValueTooLargeError, StepValueError)
    assert issubclass(StepValueError, JobStepError)
    assert issubclass(InvalidStepNameError, JobStepError)
