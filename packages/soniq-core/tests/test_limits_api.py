"""Fleet-wide limits as the app declares them (issue 19): `@app.job(max_concurrent=, rate_limit=,
limit_key=)`, the `queue_limits` setting, `app.group_limits()` and each row's `limit_key`.

The store enforces the limits (the contract suite checks that); these tests check what core
decides: bad declarations fail at decoration or construction with nothing registered, and the
`limit_key` each row is stored with.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from soniq import GroupLimit, InvalidLimitError, JobOptionsError, LimitScope, Settings, SettingsError, Soniq
from soniq.limits import format_rate, parse_rate_limit


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
