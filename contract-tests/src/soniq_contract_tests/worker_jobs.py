"""Jobs that the process scenarios run inside real ``soniq worker`` processes.

Imported by the child as ``--jobs-modules soniq_contract_tests.worker_jobs``;
the child builds its app from ``SONIQ_CT_URL``, ``SONIQ_CT_NAMESPACE`` and
the JSON ``SONIQ_CT_OPTIONS`` (extra `from_url` keywords; every other
setting comes from the usual ``SONIQ_*`` variables); job names listed in
``SONIQ_CT_WITHOUT`` (comma-separated) are left out, as in a worker still
running an older release of the code (the rolling-deploy scenario). With
``SONIQ_CT_LIMITED=1`` the jobs with fleet-wide limits are registered too
(the issue-19 fleet scenarios); without it the app has no limit, so every
other scenario claims on the unlimited path. ``SONIQ_CT_RELEASE=old`` builds the deploy-day
scenarios' older release of ``ct.versioned`` (version 1, arguments ``tag, amount``); the default,
``new``, is version 2 (``tag, cents``) with an upgrade from 1. Each handler appends
``<event> <tag> <pid>`` to the file named by ``SONIQ_CT_RUNLOG`` so a test can wait on what
really ran, and where.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Mapping
from typing import Any

from soniq import JobContext, Soniq

LIMITED_MAX_CONCURRENT = 2
"""`ct.limited` runs at most this many at once across every worker."""
RATED_PER_SECOND = 5
"""`ct.rated` starts at most this many per one-second window across every worker."""


def log_run(event: str, tag: str) -> int:
    """Append one line and return how many `event` lines this tag has now."""
    path = os.environ["SONIQ_CT_RUNLOG"]
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{event} {tag} {os.getpid()}\n")
        handle.flush()
        os.fsync(handle.fileno())
    with open(path, encoding="utf-8") as handle:
        return sum(1 for line in handle if line.split(" ")[:2] == [event, tag])


def backend_options(namespace: str | None, extra: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The `from_url` keywords of a scenario's app: its namespace plus the suite's options."""
    options = {**(extra or {}), **({"namespace": namespace} if namespace else {})}
    return options or None


def build_app(
    url: str,
    namespace: str | None,
    options: Mapping[str, Any] | None = None,
    *,
    without: frozenset[str] = frozenset(),
    limited: bool = False,
    release: str = "new",
    **settings: Any,
) -> Soniq:
    app = Soniq(url, backend_options=backend_options(namespace, options), **settings)

    @app.job(name="ct.sleep_async", max_retries=3)
    async def sleep_async(tag: str, seconds: float) -> str:
        log_run("start", tag)
        await asyncio.sleep(seconds)
        log_run("end", tag)
        return "slept"

    @app.job(name="ct.sleep_sync", max_retries=3)
    def sleep_sync(tag: str, seconds: float) -> str:
        log_run("start", tag)
        time.sleep(seconds)
        log_run("end", tag)
        return "slept"

    @app.job(name="ct.block_first_runs", max_retries=0)
    async def block_first_runs(tag: str, blocked_runs: int) -> str:
        """Sleeps forever on its first `blocked_runs` runs; later runs return at once."""
        runs = log_run("start", tag)
        if runs <= blocked_runs:
            await asyncio.sleep(3600)
        log_run("end", tag)
        return f"finished on run {runs}"

    @app.job(name="ct.block_first_runs_with_retries", max_retries=3)
    async def block_first_runs_with_retries(tag: str, blocked_runs: int) -> str:
        return await block_first_runs(tag, blocked_runs)

    @app.job(name="ct.kill_my_worker", max_retries=1)
    def kill_my_worker(tag: str) -> None:
        log_run("start", tag)
        os.kill(os.getpid(), signal.SIGKILL)

    @app.job(name="ct.fail_deep", max_retries=0)
    def fail_deep(tag: str, customer: int) -> None:
        """Fails two calls down, so the stored traceback has frames of the job's own code only."""
        log_run("start", tag)
        look_up(customer)

    add_fleet_jobs(app, limited=limited)
    add_deploy_day_jobs(app, release=release)

    if "ct.new_job" not in without:

        @app.job(name="ct.new_job", max_retries=3)
        async def new_job(tag: str) -> str:
            """Only in the new release of the code."""
            log_run("start", tag)
            log_run("end", tag)
            return "new"

    return app


def look_up(customer: int) -> None:
    raise LookupError(f"customer {customer} not found")


def interval(started: float) -> dict[str, Any]:
    """What the fleet jobs return: when the handler ran (wall clock, comparable across processes) and where."""
    return {"start": started, "end": time.time(), "pid": os.getpid()}


def add_fleet_jobs(app: Soniq, *, limited: bool) -> None:
    """The issue-19 jobs: limited groups, cancellable handlers, waited-for results, dependency steps."""

    @app.job(name="ct.cancellable_async", max_retries=3)
    async def cancellable_async(tag: str) -> str:
        log_run("start", tag)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            log_run("unwound", tag)
            raise
        return "never"

    @app.job(name="ct.cancellable_sync", max_retries=3)
    def cancellable_sync(tag: str, ctx: JobContext) -> str:
        log_run("start", tag)
        deadline = time.monotonic() + 60
        while not ctx.cancel_requested and time.monotonic() < deadline:
            time.sleep(0.01)
        log_run("saw_cancel" if ctx.cancel_requested else "gave_up", tag)
        return "stopped"

    @app.job(name="ct.answer", max_retries=0)
    async def answer(value: int, delay: float = 0.0) -> int:
        await asyncio.sleep(delay)
        return value * 2

    @app.job(name="ct.fail_now", max_retries=0)
    async def fail_now(message: str, delay: float = 0.0) -> None:
        await asyncio.sleep(delay)
        raise ValueError(message)

    @app.job(name="ct.step", max_retries=0)
    async def step(seconds: float = 0.0) -> dict[str, Any]:
        started = time.time()
        if seconds:
            await asyncio.sleep(seconds)
        return interval(started)

    if limited:

        @app.job(name="ct.limited", max_retries=0, max_concurrent=LIMITED_MAX_CONCURRENT)
        async def limited_job(seconds: float) -> dict[str, Any]:
            started = time.time()
            await asyncio.sleep(seconds)
            return interval(started)

        @app.job(name="ct.one_per_customer", max_retries=0, max_concurrent=1, limit_key="customer")
        async def one_per_customer(customer: str, seconds: float) -> dict[str, Any]:
            started = time.time()
            await asyncio.sleep(seconds)
            return {**interval(started), "customer": customer}

        @app.job(name="ct.rated", max_retries=0, rate_limit=(RATED_PER_SECOND, 1.0))
        async def rated(n: int) -> dict[str, Any]:
            return interval(time.time())


def add_deploy_day_jobs(app: Soniq, *, release: str) -> None:
    """The deploy-day jobs: three resumable steps, and one job whose arguments change between releases."""

    @app.job(name="ct.three_steps", max_retries=3)
    async def three_steps(tag: str, ctx: JobContext) -> list[str]:
        """Step two blocks for good on its first run; every step logs ``step-<name>`` when it really runs."""
        log_run("start", tag)
        first: str = await ctx.step("one", plain_step, "one", tag)
        second: str = await ctx.step("two", blocking_step, tag)
        third: str = await ctx.step("three", plain_step, "three", tag)
        log_run("end", tag)
        return [first, second, third]

    if release == "old":

        @app.job(name="ct.versioned", max_retries=0)
        async def versioned_v1(tag: str, amount: int) -> dict[str, Any]:
            log_run("start", tag)
            return {"version": 1, "amount": amount, "pid": os.getpid()}

    else:

        @app.job(name="ct.versioned", max_retries=0, version=2, upgrades={1: amount_to_cents})
        async def versioned_v2(tag: str, cents: int) -> dict[str, Any]:
            log_run("start", tag)
            return {"version": 2, "cents": cents, "pid": os.getpid()}


def plain_step(name: str, tag: str) -> str:
    """A plain step (run in a thread by `ctx.step`)."""
    log_run(f"step-{name}", tag)
    return f"{name}@{os.getpid()}"


async def blocking_step(tag: str) -> str:
    """Step two: sleeps for good on its first run (a shutdown cuts it off), returns at once later."""
    if log_run("step-two", tag) <= 1:
        await asyncio.sleep(3600)
    return f"two@{os.getpid()}"


def amount_to_cents(args: dict[str, Any]) -> dict[str, Any]:
    """``ct.versioned``'s upgrade from version 1 (``amount`` in units) to 2 (``cents``)."""
    return {"tag": args["tag"], "cents": int(args["amount"]) * 100}


if os.environ.get("SONIQ_CT_URL"):
    app = build_app(
        os.environ["SONIQ_CT_URL"],
        os.environ.get("SONIQ_CT_NAMESPACE") or None,
        json.loads(os.environ.get("SONIQ_CT_OPTIONS") or "{}"),
        without=frozenset(filter(None, (os.environ.get("SONIQ_CT_WITHOUT") or "").split(","))),
        limited=os.environ.get("SONIQ_CT_LIMITED") == "1",
        release=os.environ.get("SONIQ_CT_RELEASE") or "new",
    )
