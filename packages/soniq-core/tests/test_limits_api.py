"""Fleet-wide limits as the app declares them: `@app.job(max_concurrent=, rate_limit=,
limit_key=)`, the `queue_limits` setting, `app.group_limits()` and each row's `limit_key`.

The store enforces the limits (the contract suite checks that); these tests check what core
decides: bad declarations fail at decoration or construction with nothing registered, and the
`limit_key` each row is stored with.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from soniq import GroupLimit, InvalidLimitError, JobOptionsError, LimitScope, Settings, SettingsError, Soniq
from soniq.limits import format_rate, parse_rate_limit
from soniq.params import ClaimJobsParams


@pytest_asyncio.fixture(params=["memory", "sqlite"])
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Soniq]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'limits.db'}"
    made = Soniq(url, observers="")
    yield made
    await made.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10/s", (10, 1.0)),
        ("100/m", (100, 60.0)),
        ("1000/h", (1000, 3600.0)),
        ("10/5s", (10, 5.0)),
        ("3/2m", (3, 120.0)),
        (" 7 / 0.5s ", (7, 0.5)),
        ((3, 2), (3, 2.0)),
        ([4, 0.25], (4, 0.25)),
    ],
)
def test_rate_limits_parse_to_count_and_period(text: Any, expected: tuple[int, float]) -> None:
    assert parse_rate_limit(text) == expected


@pytest.mark.parametrize(
    "bad", ["0/s", "-1/s", "10/0s", "10", "10/d", "ten/s", "", (0, 1), (1, 0), (1, -2), (1, math.nan), (1, math.inf)]
)
def test_bad_rate_limits_are_refused(bad: Any) -> None:
    with pytest.raises(InvalidLimitError):
        parse_rate_limit(bad)


def test_rates_print_back_in_the_shape_they_are_written() -> None:
    assert [format_rate(*parse_rate_limit(t)) for t in ("10/s", "100/m", "5/h", "10/5s")] == [
        "10/s",
        "100/m",
        "5/h",
        "10/5s",
    ]


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"max_concurrent": 0}, "max_concurrent must be at least 1"),
        ({"max_concurrent": -3}, "max_concurrent must be at least 1"),
        ({"max_concurrent": 1.5}, "whole number"),
        ({"max_concurrent": True}, "whole number"),
        ({"rate_limit": "0/s"}, "at least 1 start"),
        ({"rate_limit": "5/fortnight"}, "rate_limit must look like"),
        ({"rate_limit": (5, 0)}, "period above 0"),
        ({"max_concurrent": 1, "limit_key": "tenant"}, "limit_key 'tenant' names no parameter"),
        ({"max_concurrent": 1, "limit_key": 42}, "limit_key must be an argument name"),
        ({"limit_key": "customer_id"}, "declares none"),
    ],
)
def test_a_limit_that_cannot_be_enforced_fails_at_decoration_and_registers_nothing(
    options: dict[str, Any], fragment: str
) -> None:
    app = Soniq("memory://", observers="")
    with pytest.raises(InvalidLimitError, match=fragment):

        @app.job(name="sync_customer", **options)
        async def sync_customer(customer_id: int) -> None: ...

    assert app.registry.get("sync_customer") is None
    assert app.group_limits() == ()


def test_group_limits_lists_queue_limits_then_job_limits_partitioned_only_with_a_key() -> None:
    app = Soniq(
        "memory://",
        observers="",
        queue_limits={"emails": {"max_concurrent": 5, "rate_limit": "100/m"}, "billing": {"rate_limit": [2, 1]}},
    )

    @app.job(name="sync_customer", max_concurrent=1, limit_key="customer_id")
    async def sync_customer(customer_id: int) -> None: ...

    @app.job(name="call_api", rate_limit="10/5s")
    def call_api() -> None: ...

    @app.job(name="plain")
    async def plain() -> None: ...

    assert app.group_limits() == (
        GroupLimit(scope=LimitScope.QUEUE, name="billing", rate_limit=2, rate_period=1.0),
        GroupLimit(scope=LimitScope.QUEUE, name="emails", max_concurrent=5, rate_limit=100, rate_period=60.0),
        GroupLimit(scope=LimitScope.JOB, name="call_api", rate_limit=10, rate_period=5.0),
        GroupLimit(scope=LimitScope.JOB, name="sync_customer", max_concurrent=1, partitioned=True),
    )
    assert app.group_limits() is app.group_limits()  # built once, not per claim

    @app.job(name="later", max_concurrent=3)
    async def later() -> None: ...

    assert app.group_limits()[-2] == GroupLimit(scope=LimitScope.JOB, name="later", max_concurrent=3)


def test_an_app_without_limits_has_none() -> None:
    app = Soniq("memory://", observers="")

    @app.job(name="plain")
    async def plain() -> None: ...

    assert app.group_limits() == ()


def test_queue_limits_come_from_the_environment_as_json() -> None:
    settings = Settings.load(environ={"SONIQ_QUEUE_LIMITS": '{"emails": {"max_concurrent": 2, "rate_limit": "3/h"}}'})
    assert settings.queue_limits == (
        GroupLimit(scope=LimitScope.QUEUE, name="emails", max_concurrent=2, rate_limit=3, rate_period=3600.0),
    )
    assert Settings.load(environ={"SONIQ_QUEUE_LIMITS": ""}).queue_limits == ()


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"emails": {"max_concurrent": 0}}, "queue 'emails': max_concurrent must be at least 1"),
        ({"emails": {"rate_limit": "0/s"}}, "queue 'emails': rate_limit must allow at least 1"),
        ({"emails": {"rate_limit": "10/x"}}, "queue 'emails': rate_limit must look like"),
        ({"emails": {}}, "declares no limit"),
        ({"emails": {"max_concurent": 2}}, "unknown key(s) 'max_concurent'"),
        ({"emails": 5}, "must map to an object"),
        ({"a,b": {"max_concurrent": 1}}, "contains ','"),
        ('{"emails": ', "expected a JSON object"),
        ([("emails", 1)], "expected a mapping"),
    ],
)
def test_bad_queue_limits_fail_at_construction_naming_the_setting(value: Any, fragment: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Soniq("memory://", observers="", queue_limits=value)
    assert caught.value.setting == "queue_limits"
    assert fragment in str(caught.value)
    assert "SONIQ_QUEUE_LIMITS" in str(caught.value)


async def _stored_keys(app: Soniq) -> list[str | None]:
    return sorted((row["limit_key"] for row in await app.list_jobs(limit=100)), key=str)


@pytest.mark.asyncio
async def test_the_limit_key_is_the_named_argument_as_text(app: Soniq) -> None:
    @app.job(name="sync_customer", max_concurrent=1, limit_key="customer_id")
    async def sync_customer(customer_id: int, region: str = "eu") -> None: ...

    first = await app.enqueue(sync_customer, customer_id=7)
    await app.enqueue_many(sync_customer, [{"customer_id": 8}, {"customer_id": "x"}])
    row = await app.get_job(first)
    assert row is not None
    assert row["limit_key"] == "7"
    assert await _stored_keys(app) == ["7", "8", "x"]


@pytest.mark.asyncio
async def test_a_left_out_argument_takes_the_parameters_default_as_its_key(app: Soniq) -> None:
    @app.job(name="per_region", max_concurrent=2, limit_key="region")
    async def per_region(customer_id: int, region: str = "eu") -> None: ...

    await app.enqueue(per_region, customer_id=1)
    await app.enqueue(per_region, customer_id=2, region="us")
    assert await _stored_keys(app) == ["eu", "us"]


@pytest.mark.asyncio
async def test_a_callable_limit_key_gets_the_arguments(app: Soniq) -> None:
    seen: list[dict[str, Any]] = []

    def tenant_and_kind(args: Any) -> str:
        seen.append(dict(args))
        return f"{args['tenant']}:{args['kind']}"

    @app.job(name="export", rate_limit="1/s", limit_key=tenant_and_kind)
    async def export(tenant: str, kind: str) -> None: ...

    await app.enqueue(export, tenant="acme", kind="csv")
    assert await _stored_keys(app) == ["acme:csv"]
    assert seen == [{"tenant": "acme", "kind": "csv"}]


@pytest.mark.asyncio
async def test_jobs_without_a_key_store_none(app: Soniq) -> None:
    @app.job(name="limited", max_concurrent=1)
    async def limited(n: int) -> None: ...

    @app.job(name="plain")
    async def plain(n: int) -> None: ...

    await app.enqueue(limited, n=1)
    await app.enqueue(plain, n=2)
    assert await _stored_keys(app) == [None, None]


@pytest.mark.asyncio
async def test_a_key_that_cannot_be_computed_stores_nothing(app: Soniq) -> None:
    @app.job(name="loose", max_concurrent=1, limit_key="customer_id")
    async def loose(**kwargs: Any) -> None: ...

    def broken(args: Any) -> str:
        raise KeyError("tenant")

    @app.job(name="broken_key", max_concurrent=1, limit_key=broken)
    async def broken_key(n: int) -> None: ...

    @app.job(name="long_key", max_concurrent=1, limit_key="text")
    async def long_key(text: str) -> None: ...

    with pytest.raises(JobOptionsError, match=r"limited per .customer_id.*does not pass customer_id"):
        await app.enqueue(loose, other=1)
    with pytest.raises(JobOptionsError, match="limit_key callable of job 'broken_key' raised KeyError"):
        await app.enqueue_many(broken_key, [{"n": 1}])
    with pytest.raises(JobOptionsError, match="over the limit of 255"):
        await app.enqueue(long_key, text="x" * 300)
    assert await app.list_jobs() == []


def test_limit_key_may_name_any_argument_of_a_job_taking_kwargs_or_a_model_field() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Order(pydantic.BaseModel):  # type: ignore[misc, name-defined]
        shop: str

    app = Soniq("memory://", observers="")

    @app.job(name="free", max_concurrent=1, limit_key="shop")
    async def free(**kwargs: Any) -> None: ...

    @app.job(name="modelled", max_concurrent=1, limit_key="shop", args_model=Order)
    async def modelled(**fields: Any) -> None: ...

    limits: Callable[[], tuple[GroupLimit, ...]] = app.group_limits
    assert [limit.name for limit in limits()] == ["free", "modelled"]


# -- a worker under the declared limits, and soniq inspect -----------------------------------


async def _run_until_done(app: Soniq, total: int, *, concurrency: int) -> None:
    for _ in range(20):
        await app.run_worker(concurrency=concurrency, run_once=True, install_signal_handlers=False)
        if (await app.get_queue_stats())["done"] == total:
            return
    raise AssertionError(f"not all {total} jobs ran: {await app.get_queue_stats()}")


@pytest.mark.asyncio
async def test_a_worker_runs_at_most_max_concurrent_per_key_and_keys_side_by_side(app: Soniq) -> None:
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    overall = {"now": 0, "peak": 0}

    @app.job(name="sync", max_concurrent=1, limit_key="customer")
    async def sync(customer: str) -> None:
        running[customer] = running.get(customer, 0) + 1
        overall["now"] += 1
        peak[customer] = max(peak.get(customer, 0), running[customer])
        overall["peak"] = max(overall["peak"], overall["now"])
        await asyncio.sleep(0.05)
        running[customer] -= 1
        overall["now"] -= 1

    await app.enqueue_many(sync, [{"customer": c} for c in "ab" * 4])
    await _run_until_done(app, 8, concurrency=4)
    assert peak == {"a": 1, "b": 1}
    assert overall["peak"] == 2  # the two customers did run at the same time


@pytest.mark.asyncio
async def test_a_queue_limit_holds_across_the_jobs_of_the_queue(tmp_path: Path) -> None:
    app = Soniq("memory://", observers="", queue_limits={"slow": {"max_concurrent": 2}})
    overall = {"now": 0, "peak": 0}

    async def body() -> None:
        overall["now"] += 1
        overall["peak"] = max(overall["peak"], overall["now"])
        await asyncio.sleep(0.05)
        overall["now"] -= 1

    @app.job(name="one", queue="slow")
    async def one() -> None:
        await body()

    @app.job(name="two", queue="slow")
    async def two() -> None:
        await body()

    try:
        await app.enqueue_many(one, [{}] * 3)
        await app.enqueue_many(two, [{}] * 3)
        await _run_until_done(app, 6, concurrency=6)
        assert overall["peak"] == 2
    finally:
        await app.close()


def test_soniq_inspect_lists_the_limits_and_what_runs_in_each_group(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'inspect.db'}"
    (tmp_path / "limited_jobs.py").write_text(
        "from soniq import Soniq\n"
        f"app = Soniq({url!r})\n"
        "@app.job(name='sync_customer', max_concurrent=1, limit_key='customer_id')\n"
        "async def sync_customer(customer_id: int) -> None: ...\n"
    )

    async def prepare() -> None:
        app = Soniq(url, observers="")

        @app.job(name="sync_customer", max_concurrent=1, limit_key="customer_id")
        async def sync_customer(customer_id: int) -> None: ...

        try:
            await app.enqueue_many(sync_customer, [{"customer_id": 1}, {"customer_id": 2}, {"customer_id": 1}])
            backend = await app.connected_backend()
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=None, limit=10, mark_started=False, limits=app.group_limits())
            )
            assert sorted(row.limit_key or "" for row in claimed) == ["1", "2"]
        finally:
            await app.close()

    asyncio.run(prepare())
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env.update(SONIQ_OBSERVERS="", SONIQ_QUEUE_LIMITS='{"emails": {"rate_limit": "10/5s"}}')
    command = [sys.executable, "-m", "soniq", "inspect", "--jobs-modules", "limited_jobs"]
    shown = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    limits = json.loads(shown.stdout)["limits"]
    assert [(entry["scope"], entry["name"], entry["processing"]) for entry in limits] == [
        ("queue", "emails", 0),
        ("job", "sync_customer", 2),
    ]
    assert limits[0]["rate_limit"] == "10/5s"
    assert limits[1]["processing_by_key"] == [{"limit_key": "1", "processing": 1}, {"limit_key": "2", "processing": 1}]
    text = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert "job sync_customer: at most 1 running, per limit_key; 2 running now" in text.stdout
    assert "queue emails: 10/5s starts; 0 running now" in text.stdout
