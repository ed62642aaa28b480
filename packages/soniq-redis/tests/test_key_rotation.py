"""Re-sealing stored sealed values (`KeyRotationStore`) on one Redis and on a Redis Cluster: the walk
over job and dead-letter rows finds exactly the rows holding a sealed value, once each, across pages
(also when the row a cursor names has gone meanwhile); `reseal_row` is a compare-and-set of all its
fields or none; and ``soniq keys rotate``'s `rotate_keys` re-seals an app's rows so that a worker with
the new key alone runs them."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from redis.crc import key_slot

from soniq import JobContext, Soniq
from soniq.backend import KeyRotationStore
from soniq.encryption import ENVELOPE_KEY, Cipher, cipher_for, generate_key, is_envelope, is_sealed_text
from soniq.key_rotation import rotate_keys
from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeleteJobParams,
    EnqueueJobsParams,
    GetJobParams,
    JobResult,
    ResealRowParams,
    SaveProgressParams,
    SealedRowsParams,
)
from soniq.records import NewJob, SealedRow
from soniq_redis import RedisBackend

REDIS_URL = os.environ.get("SONIQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
CLUSTER_URL = os.environ.get("SONIQ_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000")

pytestmark = pytest.mark.asyncio

K1, K2 = generate_key(), generate_key()
OLD = Cipher([K1])


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true, so this fails instead of skipping)")
    pytest.skip(reason)


@pytest.fixture(params=["single", "cluster"])
def url(request: pytest.FixtureRequest) -> str:
    return REDIS_URL if request.param == "single" else CLUSTER_URL


@pytest_asyncio.fixture
async def store(url: str) -> AsyncIterator[RedisBackend]:
    """A connected backend in a fresh namespace, on the single server and on the cluster."""
    backend = RedisBackend.from_url(url, namespace=f"kr_{uuid.uuid4().hex[:10]}")
    try:
        await backend.connect()
    except Exception as exc:
        _unavailable(f"no Redis at {url} ({exc})")
    try:
        yield backend
    finally:
        await backend.drop_schema()
        await backend.close()


def _job(args: Any, queue: str) -> NewJob:
    return NewJob(
        id=str(uuid.uuid4()),
        job_name="tests.vault",
        args=args,
        queue=queue,
        priority=100,
        scheduled_at=datetime.now(UTC) - timedelta(seconds=1),
        max_attempts=3,
    )


def _sealed(n: int) -> dict[str, str]:
    return OLD.seal({"n": n})


def _progress(message: str) -> str:
    return json.dumps({"done": 1, "total": 2, "message": message, "updated_at": "2026-01-01T00:00:00+00:00"})


async def _enqueue(store: RedisBackend, *args: Any, queue: str = "default") -> list[str]:
    """Every job in one batch: one `created_at`, so one score in the job index."""
    ids = await store.enqueue_jobs(EnqueueJobsParams(jobs=[_job(a, queue) for a in args]))
    assert ids is not None
    return ids


async def _claim(store: RedisBackend, worker: str, count: int, queue: str = "default") -> list[str]:
    params = ClaimJobsParams(worker_id=worker, queues=[queue], limit=count, mark_started=True)
    rows = await store.claim_jobs(params)
    assert len(rows) == count
    return [row.id for row in rows]


async def _raw(store: RedisBackend, key: str, field: str) -> str | None:
    client, _ = await store._ready()
    value = await client.hget(key, field)
    return None if value is None else str(value)


async def _walk(store: RedisBackend, limit: int) -> tuple[list[SealedRow], int]:
    rows: list[SealedRow] = []
    pages, cursor = 0, None
    while True:
        page = await store.sealed_rows(SealedRowsParams(cursor=cursor, limit=limit))
        assert len(page.rows) <= limit
        rows += page.rows
        pages += 1
        if page.next_cursor is None:
            return rows, pages
        cursor = page.next_cursor


async def _mixed_rows(store: RedisBackend) -> dict[tuple[str, str], dict[str, str | None]]:
    """Sealed and plain job and dead-letter rows (9 job rows, 2 dead letters); returns each
    sealed row's stored texts by (table, id)."""
    await _enqueue(store, *({"plain": n} for n in range(5)), queue="plain")
    sealed_args = await _enqueue(store, *(_sealed(n) for n in range(4)), queue="sealed")
    # A sealed result and a sealed progress message on plain arguments, and a plain progress message.
    done_sealed, running_sealed, running_plain = await _claim(store, "w1", 3, "plain")
    result = OLD.seal({"ok": True})
    assert await store.complete_jobs(CompleteJobsParams(worker_id="w1", results=[JobResult(done_sealed, result)]))
    assert await store.save_progress(SaveProgressParams(running_sealed, "w1", _progress(OLD.seal_text("half"))))
    assert await store.save_progress(SaveProgressParams(running_plain, "w1", _progress("half, in the clear")))
    # Dead letters: one with plain arguments, one with sealed ones.
    dead_plain, dead_sealed = await _enqueue(store, {"plain": 99}, _sealed(99), queue="dead")
    for row_id in await _claim(store, "w2", 2, "dead"):
        assert await store.dead_letter_job(DeadLetterJobParams(row_id, "w2", "boom", "failed"))
    keys = store.keys
    expected: dict[tuple[str, str], dict[str, str | None]] = {}
    for row_id in [*sealed_args, done_sealed, running_sealed]:
        expected["jobs", row_id] = {f: await _raw(store, keys.job(row_id), f) for f in ("args", "result", "progress")}
    expected["dead_letter", dead_sealed] = {"args": await _raw(store, keys.dead(dead_sealed), "args")}
    assert await _raw(store, keys.dead(dead_plain), "args") == '{"plain":99}'
    return expected


async def test_the_backend_fills_the_role(store: RedisBackend) -> None:
    assert store.capabilities.roles["KeyRotationStore"] == 1
    assert isinstance(store, KeyRotationStore)


@pytest.mark.parametrize("limit", [1, 2, 3, 500])
async def test_a_walk_finds_exactly_the_sealed_rows_once_each(store: RedisBackend, limit: int) -> None:
    expected = await _mixed_rows(store)
    rows, pages = await _walk(store, limit)
    found = [(row.table, row.id) for row in rows]
    assert len(found) == len(set(found))
    assert set(found) == set(expected)
    for row in rows:
        texts = expected[row.table, row.id]
        assert row.args_json == texts["args"]
        assert row.result_json == texts.get("result")
        assert row.progress_json == texts.get("progress")
    # 9 job members and 2 dead letters are looked at, `limit` per page at most.
    assert pages >= -(-11 // limit)
    if limit == 500:
        assert pages == 1


async def test_an_empty_store_is_one_empty_page(store: RedisBackend) -> None:
    page = await store.sealed_rows(SealedRowsParams(cursor=None, limit=10))
    assert (page.rows, page.next_cursor) == ([], None)


async def test_a_walk_resumes_past_a_row_that_left_between_pages(store: RedisBackend) -> None:
    ids = await _enqueue(store, *(_sealed(n) for n in range(9)))
    client, _ = await store._ready()
    members = await client.zrange(store.keys.key("all"), 0, -1)
    # One batch, one score: the index orders them by id alone.
    assert members == sorted(ids)
    first = await store.sealed_rows(SealedRowsParams(cursor=None, limit=3))
    assert [row.id for row in first.rows] == members[:3]
    assert first.next_cursor is not None
    # The row the cursor names goes, and so does the next one.
    assert await store.delete_job(DeleteJobParams(members[2]))
    assert await store.delete_job(DeleteJobParams(members[3]))
    cursor: str | None = first.next_cursor
    seen = [row.id for row in first.rows]
    while cursor is not None:
        page = await store.sealed_rows(SealedRowsParams(cursor=cursor, limit=3))
        seen += [row.id for row in page.rows]
        cursor = page.next_cursor
    assert seen == members[:3] + members[4:]


async def test_a_cursor_the_backend_did_not_write_is_refused(store: RedisBackend) -> None:
    for cursor in ("", "jobs:x:1", "jobs:1", "other:1:2", "jobs:nan:1"):
        with pytest.raises(ValueError, match="cursor"):
            await store.sealed_rows(SealedRowsParams(cursor=cursor, limit=5))
    with pytest.raises(ValueError, match="limit"):
        await store.sealed_rows(SealedRowsParams(cursor=None, limit=0))
    with pytest.raises(ValueError, match="table"):
        await store.reseal_row(ResealRowParams(table="soniq_jobs", id="x"))


async def test_reseal_writes_every_given_field_or_none(store: RedisBackend) -> None:
    [row_id] = await _enqueue(store, _sealed(1))
    await _claim(store, "w", 1)
    old_progress = _progress(OLD.seal_text("step"))
    assert await store.save_progress(SaveProgressParams(row_id, "w", old_progress))
    key = store.keys.job(row_id)
    old_args = await _raw(store, key, "args")
    assert old_args is not None
    new_args = json.dumps(cipher_for((K2,)).seal({"n": 1}), separators=(",", ":"))
    new_progress = _progress(cipher_for((K2,)).seal_text("step"))

    # One field stale: nothing is written, not even the field that still matches.
    stale = ResealRowParams("jobs", row_id, args_json=(old_args, new_args), progress_json=("{}", new_progress))
    assert await store.reseal_row(stale) is False
    assert await _raw(store, key, "args") == old_args
    assert await _raw(store, key, "progress") == old_progress
    # A field the row does not hold (no result yet) is stale too.
    assert await store.reseal_row(ResealRowParams("jobs", row_id, result_json=(old_args, new_args))) is False
    assert await _raw(store, key, "result") is None

    both = ResealRowParams("jobs", row_id, args_json=(old_args, new_args), progress_json=(old_progress, new_progress))
    assert await store.reseal_row(both) is True
    assert await _raw(store, key, "args") == new_args
    assert await _raw(store, key, "progress") == new_progress
    record = await store.get_job(GetJobParams(row_id))
    assert record is not None
    assert cipher_for((K2,)).open(record.args) == {"n": 1}
    assert record.worker_id == "w"  # nothing else of the row changed
    # Replaying the same change finds the new value, not the old one.
    assert await store.reseal_row(both) is False
    assert await _raw(store, key, "args") == new_args


async def test_reseal_of_a_dead_letter_and_of_a_missing_row(store: RedisBackend) -> None:
    [row_id] = await _enqueue(store, _sealed(5))
    await _claim(store, "w", 1)
    assert await store.dead_letter_job(DeadLetterJobParams(row_id, "w", "boom", "failed"))
    key = store.keys.dead(row_id)
    old = await _raw(store, key, "args")
    assert old is not None
    new = json.dumps({ENVELOPE_KEY: "new-token"}, separators=(",", ":"))
    assert await store.reseal_row(ResealRowParams("jobs", row_id, args_json=(old, new))) is False
    assert await store.reseal_row(ResealRowParams("dead_letter", row_id, args_json=(old, new))) is True
    assert await _raw(store, key, "args") == new
    missing = str(uuid.uuid4())
    for table in ("jobs", "dead_letter"):
        assert await store.reseal_row(ResealRowParams(table, missing, args_json=(old, new))) is False
    client, _ = await store._ready()
    assert not await client.exists(store.keys.job(missing), store.keys.dead(missing))


async def test_the_scripts_touch_only_the_namespace_slot(store: RedisBackend) -> None:
    await _mixed_rows(store)
    await _walk(store, 2)
    client, _ = await store._ready()
    slot = key_slot(store.keys.key("schema").encode())
    keys = [str(k) async for k in client.scan_iter(match=store.keys.scan_pattern)]
    assert keys
    assert {key_slot(k.encode()) for k in keys} == {slot}


# -- through the app: `rotate_keys`, then a worker with the new key alone -----------------------


def _declare(app: Soniq, ran: list[int]) -> None:
    @app.job(name="vault.store", encrypted=True, max_retries=0)
    async def vault_store(n: int, ctx: JobContext) -> dict[str, int]:
        await ctx.progress(1, 2, message=f"storing {n}")
        if n == 2:
            raise ValueError("two")
        ran.append(n)
        return {"stored": n}


async def _run_once(app: Soniq) -> None:
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 30)


async def test_rotation_through_the_app_leaves_values_only_the_new_key_opens(url: str) -> None:
    namespace = f"kr_{uuid.uuid4().hex[:10]}"
    settings: dict[str, Any] = {"backend_options": {"namespace": namespace}, "observers": "", "poll_interval": 0.05}
    old_app = Soniq(url, encryption_keys=[K1], **settings)
    new_app = Soniq(url, encryption_keys=[K2, K1], **settings)
    only_new = Soniq(url, encryption_keys=[K2], **settings)
    ran: list[int] = []
    for app in (old_app, new_app, only_new):
        _declare(app, ran)
    try:
        dropped: Any = await old_app.connected_backend()
    except Exception as exc:
        await old_app.close()
        _unavailable(f"no Redis at {url} ({exc})")
    try:
        first = [await old_app.enqueue("vault.store", n=n) for n in range(4)]
        await _run_once(old_app)  # 0, 1, 3 done (sealed results and progress), 2 dead-lettered
        assert sorted(ran) == [0, 1, 3]
        queued = await old_app.enqueue("vault.store", n=7)

        backend = await new_app.connected_backend()
        report = await rotate_keys(backend, cipher_for((K2, K1)), batch_size=2)
        assert report.undecryptable == 0
        # Three done rows (args, result, progress), the dead letter (args), the queued row (args).
        assert (report.rows_resealed, report.values_resealed) == (5, 3 * 3 + 1 + 1)

        newest = cipher_for((K2,))
        rows, _ = await _walk(backend, 3)
        assert {(row.table, row.id) for row in rows} == {
            *(("jobs", i) for i in first if i != first[2]),
            ("dead_letter", first[2]),
            ("jobs", queued),
        }
        for row in rows:
            for text in (row.args_json, row.result_json):
                if text is not None:
                    value = json.loads(text)
                    assert is_envelope(value)
                    assert newest.is_current(value)
                    newest.open(value)
            if row.progress_json is not None:
                message = json.loads(row.progress_json)["message"]
                assert is_sealed_text(message)
                assert newest.open_text(message).startswith("storing ")
        again = await rotate_keys(backend, newest)
        assert (again.values_resealed, again.undecryptable, again.rows_read) == (0, 0, 5)

        await _run_once(only_new)
        assert ran[-1] == 7
        assert await only_new.get_result(queued) == {"stored": 7}
        assert await only_new.get_result(first[0]) == {"stored": 0}
    finally:
        await dropped.drop_schema()
        for app in (old_app, new_app, only_new):
            await app.close()
