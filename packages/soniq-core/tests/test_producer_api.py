from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from soniq import JobArgumentsError, Soniq, SoniqError, UnknownJobError

pytestmark = pytest.mark.asyncio


@pytest.fixture
def app(fast_settings: dict[str, Any]) -> Soniq:
    return Soniq("memory://", **fast_settings)


async def test_enqueue_stores_a_queued_row_with_the_jobs_defaults(app: Soniq) -> None:
    @app.job(queue="emails", priority=5, max_retries=2)
    async def send(to: str) -> None: ...

    job_id = await app.enqueue(send, to="a@example.com")
    row = await app.get_job(job_id)
    assert row is not None
    assert (row["status"], row["queue"], row["priority"], row["max_attempts"]) == ("queued", "emails", 5, 3)
    assert row["job_name"].endswith("send")
    assert row["args"] == {"to": "a@example.com"}
    assert row["attempts"] == 0


async def test_enqueue_by_name_and_with_args_mapping(app: Soniq) -> None:
    @app.job(name="reports.build")
    def build(queue: str) -> None: ...

    job_id = await app.enqueue("reports.build", args={"queue": "this is an argument"})
    row = await app.get_job(job_id)
    assert row is not None
    assert row["args"] == {"queue": "this is an argument"}
    assert row["queue"] == "default"


async def test_scheduled_at_accepts_datetime_timedelta_and_seconds(app: Soniq) -> None:
    @app.job
    async def later() -> None: ...

    before = datetime.now(UTC)
    at = before + timedelta(hours=1)
    for value, expected in (
        (at, at),
        (timedelta(minutes=5), before + timedelta(minutes=5)),
        (30, before + timedelta(seconds=30)),
    ):
        row = await app.get_job(await app.enqueue(later, scheduled_at=value))
        assert row is not None
        assert abs((row["scheduled_at"] - expected).total_seconds()) < 2


async def test_unknown_job_name_is_refused_in_one_line(app: Soniq) -> None:
    with pytest.raises(UnknownJobError) as info:
        await app.enqueue("no.such.job")
    assert "no.such.job" in str(info.value)
    assert "\n" not in str(info.value)
    assert (await app.get_queue_stats())["total"] == 0


async def test_unserialisable_and_oversized_arguments_are_refused_and_nothing_is_stored(app: Soniq) -> None:
    @app.job
    async def take(value: Any) -> None: ...

    await app.enqueue(take, value="fine")
    with pytest.raises(JobArgumentsError, match="not JSON-serialisable"):
        await app.enqueue(take, value=object())
    with pytest.raises(JobArgumentsError, match="not JSON-serialisable"):
        await app.enqueue(take, value=float("nan"))
    small = Soniq("memory://", max_args_bytes=100)
    small.job(name="take")(take)
    with pytest.raises(JobArgumentsError, match=r"over the limit of 100 bytes.*SONIQ_MAX_ARGS_BYTES"):
        await small.enqueue("take", value="x" * 200)
    with pytest.raises(JobArgumentsError):
        await app.enqueue_many(take, [{"value": 1}, {"value": {1, 2}}])
    assert (await app.get_queue_stats())["total"] == 1


async def test_enqueue_many_returns_ids_in_order(app: Soniq) -> None:
    @app.job
    async def item(n: int) -> None: ...

    ids = await app.enqueue_many(item, [{"n": i} for i in range(50)])
    assert len(ids) == len(set(ids)) == 50
    rows = [await app.get_job(i) for i in ids]
    assert [r["args"]["n"] for r in rows if r] == list(range(50))


async def test_cancel_list_and_stats(app: Soniq) -> None:
    @app.job
    async def item(n: int) -> None: ...

    ids = await app.enqueue_many(item, [{"n": i} for i in range(3)])
    assert await app.cancel_job(ids[0]) is True
    assert await app.cancel_job(ids[0]) is False
    stats = await app.get_queue_stats()
    assert stats == {"total": 3, "queued": 2, "processing": 0, "done": 0, "dead_letter": 0, "cancelled": 1}
    assert [r["id"] for r in await app.list_jobs(status="cancelled")] == [ids[0]]
    with pytest.raises(ValueError, match="status must be one of"):
        await app.list_jobs(status="failed")


async def test_transactional_enqueue_is_refused_where_unsupported(app: Soniq) -> None:
    @app.job
    async def item() -> None: ...

    with pytest.raises(SoniqError, match="does not support transactional enqueue"):
        await app.enqueue(item, connection=object())


async def test_job_options_are_validated() -> None:
    app = Soniq("memory://")
    with pytest.raises(ValueError, match="max_retries"):
        app.job(max_retries=-1)(lambda: None)
    with pytest.raises(ValueError, match="timeout"):
        app.job(timeout=0)(lambda: None)


async def test_job_ids_are_unique_version_4_uuids() -> None:
    import uuid

    from soniq.serialization import new_job_ids

    ids = new_job_ids(2000)
    assert len(set(ids)) == 2000
    for text in ids[:200]:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
