"""The memory backend's walk over sealed values and their compare-and-set (`KeyRotationStore`)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from soniq import JobContext, Soniq
from soniq.backend import (
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    EnqueueJobsParams,
    GetDeadLetterParams,
    GetJobParams,
    JobRecord,
    JobResult,
    KeyRotationStore,
    NewJob,
    ResealRowParams,
    SaveProgressParams,
    SealedRow,
    SealedRowsParams,
)
from soniq.encryption import Cipher, generate_key, is_envelope, is_sealed_text
from soniq.key_rotation import rotate_keys
from soniq_memory import MemoryBackend

pytestmark = pytest.mark.asyncio

OLD, NEW = generate_key(), generate_key()
SEALER = Cipher([OLD])


def _job(args: dict[str, Any]) -> NewJob:
    return NewJob(
        id=str(uuid.uuid4()),
        job_name="vault.job",
        args=args,
        queue="default",
        priority=100,
        scheduled_at=datetime.now(UTC) - timedelta(seconds=1),
        max_attempts=1,
    )


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


async def _enqueue(backend: MemoryBackend, args: dict[str, Any]) -> str:
    job = _job(args)
    assert await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job])) == [job.id]
    return job.id


async def _claim(backend: MemoryBackend, job_id: str, worker_id: str = "w1") -> None:
    claimed = await backend.claim_jobs(ClaimJobsParams(worker_id=worker_id, queues=None, limit=100, mark_started=True))
    assert job_id in {row.id for row in claimed}


async def _row(backend: MemoryBackend, job_id: str) -> JobRecord:
    row = await backend.get_job(GetJobParams(job_id=job_id))
    assert row is not None
    return row


async def _walk(backend: MemoryBackend, limit: int) -> tuple[list[SealedRow], int]:
    """Every row a whole walk returns, and how many pages it took."""
    rows: list[SealedRow] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await backend.sealed_rows(SealedRowsParams(cursor=cursor, limit=limit))
        pages += 1
        assert len(page.rows) <= limit
        rows.extend(page.rows)
        if page.next_cursor is None:
            return rows, pages
        assert page.next_cursor != cursor
        cursor = page.next_cursor
        assert pages < 1000, "the walk never ends"


async def _one_of_each(backend: MemoryBackend) -> dict[str, str]:
    """Sealed and plain rows in both tables, one name per kind of row."""
    ids: dict[str, str] = {}
    for n in range(3):
        ids[f"sealed_queued_{n}"] = await _enqueue(backend, SEALER.seal({"n": n}))
        ids[f"plain_queued_{n}"] = await _enqueue(backend, {"n": n, "note": "__soniq_encrypted is not the mark"})
    # Only the result is sealed.
    ids["sealed_result"] = done = await _enqueue(backend, {"plain": True})
    await _claim(backend, done)
    result = JobResult(job_id=done, result=SEALER.seal([1, 2]))
    assert await backend.complete_jobs(CompleteJobsParams(worker_id="w1", results=[result])) == {done}
    # Only the progress message is sealed (the row is processing).
    ids["sealed_progress"] = running = await _enqueue(backend, {"plain": True})
    await _claim(backend, running)
    progress = {"done": 1, "total": 2, "message": SEALER.seal_text("halfway"), "updated_at": "2026-01-01T00:00:00Z"}
    saved = await backend.save_progress(
        SaveProgressParams(job_id=running, worker_id="w1", progress_json=json.dumps(progress))
    )
    assert saved
    # Dead letters: one sealed, one plain.
    for kind, args in (("sealed_dead", SEALER.seal({"d": 1})), ("plain_dead", {"d": 2})):
        ids[kind] = dead = await _enqueue(backend, args)
        await _claim(backend, dead)
        moved = await backend.dead_letter_job(
            DeadLetterJobParams(job_id=dead, worker_id="w1", error="boom", reason="max_attempts")
        )
        assert moved
    # Raw args text (as a foreign producer wrote it) holding the mark.
    ids["sealed_raw"] = raw = await _enqueue(backend, {"x": 1})
    backend.put_raw_args(raw, '{"__soniq_encrypted__": "not even a token"}')
    return ids


async def test_the_backend_declares_and_fills_the_role() -> None:
    backend = MemoryBackend()
    assert backend.capabilities.roles["KeyRotationStore"] == 1
    assert isinstance(backend, KeyRotationStore)


async def test_a_walk_in_small_pages_returns_every_sealed_row_exactly_once() -> None:
    backend = MemoryBackend()
    ids = await _one_of_each(backend)
    rows, pages = await _walk(backend, limit=2)
    found = [(row.table, row.id) for row in rows]
    assert len(found) == len(set(found))
    assert set(found) == {
        ("dead_letter" if name.endswith("_dead") else "jobs", job_id)
        for name, job_id in ids.items()
        if name.startswith("sealed")
    }
    assert pages >= (len(ids) + 1) // 2  # a page looks at two rows at most
    by_id = {row.id: row for row in rows}
    queued = by_id[ids["sealed_queued_0"]]
    assert json.loads(queued.args_json or "") == (await _row(backend, queued.id)).args
    assert (queued.result_json, queued.progress_json) == (None, None)
    done = by_id[ids["sealed_result"]]
    assert json.loads(done.result_json or "") == (await _row(backend, done.id)).result
    assert done.args_json == '{"plain":true}'
    progress = json.loads(by_id[ids["sealed_progress"]].progress_json or "")
    assert is_sealed_text(progress["message"])
    dead = by_id[ids["sealed_dead"]]
    assert (dead.table, dead.result_json, dead.progress_json) == ("dead_letter", None, None)
    assert is_envelope(json.loads(dead.args_json or ""))
    assert by_id[ids["sealed_raw"]].args_json == '{"__soniq_encrypted__": "not even a token"}'


async def test_a_walk_over_plain_rows_ends_with_empty_pages_and_an_empty_store_in_one() -> None:
    backend = MemoryBackend()
    assert (await backend.sealed_rows(SealedRowsParams(limit=5))).next_cursor is None
    for n in range(5):
        await _enqueue(backend, {"n": n})
    first = await backend.sealed_rows(SealedRowsParams(limit=2))
    assert (first.rows, first.next_cursor is not None) == ([], True)
    rows, pages = await _walk(backend, limit=2)
    assert (rows, pages) == ([], 3)


async def test_reseal_writes_every_given_field_and_nothing_else() -> None:
    backend = MemoryBackend()
    ids = await _one_of_each(backend)
    before = await _row(backend, ids["sealed_result"])
    new_result = Cipher([NEW]).seal([1, 2])
    (row,) = [r for r in (await _walk(backend, limit=50))[0] if r.id == ids["sealed_result"]]
    assert row.result_json is not None
    written = await backend.reseal_row(
        ResealRowParams(table="jobs", id=row.id, result_json=(row.result_json, _compact(new_result)))
    )
    assert written
    after = await _row(backend, row.id)
    assert after.result == new_result
    assert Cipher([NEW]).open(after.result) == [1, 2]
    assert (after.args, after.status, after.updated_at) == (before.args, before.status, before.updated_at)

    (dead,) = [r for r in (await _walk(backend, limit=50))[0] if r.id == ids["sealed_dead"]]
    assert dead.args_json is not None
    new_args = Cipher([NEW]).seal({"d": 1})
    assert await backend.reseal_row(
        ResealRowParams(table="dead_letter", id=dead.id, args_json=(dead.args_json, _compact(new_args)))
    )
    dead_row = await backend.get_dead_letter(GetDeadLetterParams(job_id=dead.id))
    assert dead_row is not None
    assert dead_row.args == new_args

    (raw,) = [r for r in (await _walk(backend, limit=50))[0] if r.id == ids["sealed_raw"]]
    assert raw.args_json is not None
    assert await backend.reseal_row(ResealRowParams(table="jobs", id=raw.id, args_json=(raw.args_json, '{"k": 1}')))
    assert (await _row(backend, raw.id)).args == {"k": 1}


async def test_reseal_with_a_stale_old_value_writes_nothing() -> None:
    backend = MemoryBackend()
    ids = await _one_of_each(backend)
    (row,) = [r for r in (await _walk(backend, limit=50))[0] if r.id == ids["sealed_progress"]]
    assert row.args_json is not None
    assert row.progress_json is not None
    # A worker settles the row after the walk read it: its own write wins.
    result = JobResult(job_id=row.id, result=SEALER.seal("finished"))
    assert await backend.complete_jobs(CompleteJobsParams(worker_id="w1", results=[result])) == {row.id}
    settled = await _row(backend, row.id)
    stale_result = _compact(SEALER.seal("something else"))
    written = await backend.reseal_row(
        ResealRowParams(
            table="jobs",
            id=row.id,
            args_json=(row.args_json, '{"changed": true}'),
            result_json=(stale_result, '{"changed": true}'),
        )
    )
    assert written is False
    assert await _row(backend, row.id) == settled  # not even the args, whose old value matched
    # The progress's old value still matches, the args' does not: all or nothing again.
    written = await backend.reseal_row(
        ResealRowParams(
            table="jobs",
            id=row.id,
            args_json=('{"plain":false}', '{"changed": true}'),
            progress_json=(row.progress_json, '{"changed": true}'),
        )
    )
    assert written is False
    assert await _row(backend, row.id) == settled


async def test_reseal_of_a_missing_row_or_a_field_the_row_lacks_is_false() -> None:
    backend = MemoryBackend()
    ids = await _one_of_each(backend)
    text = _compact(SEALER.seal(1))
    assert not await backend.reseal_row(ResealRowParams(table="jobs", id="missing", args_json=(text, text)))
    assert not await backend.reseal_row(ResealRowParams(table="dead_letter", id="missing", args_json=(text, text)))
    # A queued row as a jobs row is found; as a dead letter it is not.
    assert not await backend.reseal_row(
        ResealRowParams(table="dead_letter", id=ids["sealed_queued_0"], args_json=(text, text))
    )
    # A dead-letter row keeps no result.
    dead = ids["sealed_dead"]
    assert not await backend.reseal_row(ResealRowParams(table="dead_letter", id=dead, result_json=(text, text)))
    dead_row = await backend.get_dead_letter(GetDeadLetterParams(job_id=dead))
    assert dead_row is not None
    assert is_envelope(dead_row.args)


async def test_a_foreign_cursor_table_or_limit_is_refused() -> None:
    backend = MemoryBackend()
    with pytest.raises(ValueError, match="cursor"):
        await backend.sealed_rows(SealedRowsParams(cursor="elsewhere:1", limit=5))
    with pytest.raises(ValueError, match="limit"):
        await backend.sealed_rows(SealedRowsParams(limit=0))
    with pytest.raises(ValueError, match="table"):
        await backend.reseal_row(ResealRowParams(table="soniq_jobs", id="x", args_json=("{}", "{}")))


async def test_rotation_through_the_app_leaves_only_values_the_new_key_opens() -> None:
    url = f"memory://rotation-{uuid.uuid4().hex[:8]}"
    ran: list[str] = []

    def declare(app: Soniq) -> None:
        @app.job(name="vault.card", encrypted=True, max_retries=0)
        async def card(number: str, ctx: JobContext) -> dict[str, str]:
            await ctx.progress(1, 2, message=f"charging {number}")
            ran.append(number)
            return {"charged": number}

    async def run_once(app: Soniq) -> None:
        await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)

    old_app = Soniq(url, encryption_keys=[OLD], observers="")
    declare(old_app)
    first = await old_app.enqueue("vault.card", number="1111")
    await run_once(old_app)
    assert ran == ["1111"]
    second = await old_app.enqueue("vault.card", number="2222")  # stays queued, sealed with the old key

    both = Soniq(url, encryption_keys=[NEW, OLD], observers="")
    backend = await both.connected_backend()
    assert isinstance(backend, MemoryBackend)
    report = await rotate_keys(backend, Cipher([NEW, OLD]), batch_size=1)
    assert (report.undecryptable, report.rows_changed_meanwhile) == (0, 0)
    assert report.values_resealed == 4  # first: args, result, progress; second: args

    # Every stored sealed value now opens with the new key alone.
    new_only = Cipher([NEW])
    opened = 0
    for row in (await _walk(backend, limit=1))[0]:
        for text in (row.args_json, row.result_json):
            if text is not None and is_envelope(json.loads(text)):
                new_only.open(json.loads(text))
                opened += 1
        if row.progress_json is not None:
            new_only.open_text(json.loads(row.progress_json)["message"])
            opened += 1
    assert opened == 4

    new_app = Soniq(url, encryption_keys=[NEW], observers="")
    declare(new_app)
    assert await new_app.get_result(first) == {"charged": "1111"}
    await run_once(new_app)
    assert ran == ["1111", "2222"]
    assert await new_app.get_result(second) == {"charged": "2222"}
    for app in (old_app, both, new_app):
        await app.close()
