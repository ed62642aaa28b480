"""The walk over sealed values on SQLite and their compare-and-set (`KeyRotationStore`): keyset
pages over `soniq_jobs`, then `soniq_dead_letter_jobs`, and one fenced UPDATE per row."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from soniq import JobContext, Soniq
from soniq.backend import KeyRotationStore
from soniq.encryption import Cipher, generate_key, is_envelope, is_sealed_text
from soniq.key_rotation import rotate_keys
from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    EnqueueJobsParams,
    GetDeadLetterParams,
    GetJobParams,
    JobResult,
    ResealRowParams,
    SaveProgressParams,
    SealedRowsParams,
)
from soniq.records import JobRecord, NewJob, SealedRow
from soniq_sqlite import SQLiteBackend

JobFactory = Callable[..., NewJob]

pytestmark = pytest.mark.asyncio

OLD, NEW = generate_key(), generate_key()
SEALER = Cipher([OLD])


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _stored(raw: sqlite3.Connection, table: str, column: str, job_id: str) -> Any:
    found = raw.execute(f"SELECT {column} FROM {table} WHERE id = ?", (job_id,)).fetchone()
    assert found is not None
    return found[0]


async def _enqueue(backend: SQLiteBackend, make_job: JobFactory, args: dict[str, Any]) -> str:
    job = replace(make_job(), args=args, max_attempts=1)
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
    return str(job.id)


async def _claim(backend: SQLiteBackend, job_id: str, worker_id: str = "w1") -> None:
    claimed = await backend.claim_jobs(ClaimJobsParams(worker_id=worker_id, queues=None, limit=100, mark_started=True))
    assert job_id in {row.id for row in claimed}


async def _row(backend: SQLiteBackend, job_id: str) -> JobRecord:
    row = await backend.get_job(GetJobParams(job_id=job_id))
    assert row is not None
    return row


async def _walk(backend: SQLiteBackend, limit: int) -> tuple[list[SealedRow], int]:
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


async def _found(backend: SQLiteBackend, job_id: str) -> SealedRow:
    (row,) = [row for row in (await _walk(backend, limit=50))[0] if row.id == job_id]
    return row


async def _one_of_each(backend: SQLiteBackend, make_job: JobFactory, raw: sqlite3.Connection) -> dict[str, str]:
    """Sealed and plain rows in both tables, one name per kind of row."""
    ids: dict[str, str] = {}
    for n in range(3):
        ids[f"sealed_queued_{n}"] = await _enqueue(backend, make_job, SEALER.seal({"n": n}))
        ids[f"plain_queued_{n}"] = await _enqueue(backend, make_job, {"n": n, "note": "soniq-encrypted without colon"})
    # Only the result is sealed.
    ids["sealed_result"] = done = await _enqueue(backend, make_job, {"plain": True})
    await _claim(backend, done)
    result = JobResult(job_id=done, result=SEALER.seal([1, 2]))
    assert await backend.complete_jobs(CompleteJobsParams(worker_id="w1", results=[result])) == {done}
    # Only the progress message is sealed (the row is processing).
    ids["sealed_progress"] = running = await _enqueue(backend, make_job, {"plain": True})
    await _claim(backend, running)
    progress = {"done": 1, "total": 2, "message": SEALER.seal_text("halfway"), "updated_at": "2026-01-01T00:00:00Z"}
    saved = await backend.save_progress(
        SaveProgressParams(job_id=running, worker_id="w1", progress_json=json.dumps(progress))
    )
    assert saved
    # Dead letters: one sealed, one plain.
    for kind, args in (("sealed_dead", SEALER.seal({"d": 1})), ("plain_dead", {"d": 2})):
        ids[kind] = dead = await _enqueue(backend, make_job, args)
        await _claim(backend, dead)
        moved = await backend.dead_letter_job(
            DeadLetterJobParams(job_id=dead, worker_id="w1", error="boom", reason="max_attempts")
        )
        assert moved
    # Args text a foreign writer left, with the mark somewhere inside.
    ids["sealed_foreign"] = foreign = await _enqueue(backend, make_job, {"x": 1})
    raw.execute("UPDATE soniq_jobs SET args = ? WHERE id = ?", ('{"a": ["__soniq_encrypted__"]}', foreign))
    return ids


async def test_the_backend_declares_and_fills_the_role(backend: SQLiteBackend) -> None:
    assert backend.capabilities.roles["KeyRotationStore"] == 1
    assert isinstance(backend, KeyRotationStore)


async def test_a_walk_in_small_pages_returns_every_sealed_row_exactly_once(
    backend: SQLiteBackend, make_job: JobFactory, raw: sqlite3.Connection
) -> None:
    ids = await _one_of_each(backend, make_job, raw)
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
    # The texts are the stored ones, byte for byte.
    assert queued.args_json == _stored(raw, "soniq_jobs", "args", queued.id)
    assert (queued.result_json, queued.progress_json) == (None, None)
    assert is_envelope(json.loads(queued.args_json or ""))
    done = by_id[ids["sealed_result"]]
    assert done.result_json == _stored(raw, "soniq_jobs", "result", done.id)
    assert done.args_json == '{"plain":true}'
    progress = by_id[ids["sealed_progress"]]
    assert progress.progress_json == _stored(raw, "soniq_jobs", "progress", progress.id)
    assert is_sealed_text(json.loads(progress.progress_json or "")["message"])
    dead = by_id[ids["sealed_dead"]]
    assert (dead.table, dead.result_json, dead.progress_json) == ("dead_letter", None, None)
    assert dead.args_json == _stored(raw, "soniq_dead_letter_jobs", "args", dead.id)
    assert by_id[ids["sealed_foreign"]].args_json == '{"a": ["__soniq_encrypted__"]}'
    # Any page size walks to the same rows.
    for limit in (1, 3, 7, 500):
        again, _ = await _walk(backend, limit=limit)
        assert sorted((row.table, row.id) for row in again) == sorted(found)


async def test_a_walk_over_plain_rows_ends_with_empty_pages_and_an_empty_file_in_one(
    backend: SQLiteBackend, make_job: JobFactory
) -> None:
    assert (await backend.sealed_rows(SealedRowsParams(limit=5))).next_cursor is None
    for n in range(5):
        await _enqueue(backend, make_job, {"n": n})
    first = await backend.sealed_rows(SealedRowsParams(limit=2))
    assert (first.rows, first.next_cursor is not None) == ([], True)
    rows, pages = await _walk(backend, limit=2)
    assert (rows, pages) == ([], 3)


async def test_reseal_writes_every_given_field_and_nothing_else(
    backend: SQLiteBackend, make_job: JobFactory, raw: sqlite3.Connection
) -> None:
    ids = await _one_of_each(backend, make_job, raw)
    progress_row = await _found(backend, ids["sealed_progress"])
    assert progress_row.progress_json is not None
    assert progress_row.args_json is not None
    before = await _row(backend, progress_row.id)
    new_progress = {**json.loads(progress_row.progress_json), "message": Cipher([NEW]).seal_text("halfway")}
    new_args = {"plain": True, "again": 1}
    written = await backend.reseal_row(
        ResealRowParams(
            table="jobs",
            id=progress_row.id,
            args_json=(progress_row.args_json, _compact(new_args)),
            progress_json=(progress_row.progress_json, _compact(new_progress)),
        )
    )
    assert written
    assert _stored(raw, "soniq_jobs", "progress", progress_row.id) == _compact(new_progress)
    after = await _row(backend, progress_row.id)
    assert after.args == new_args
    assert Cipher([NEW]).open_text(after.progress["message"] if after.progress else "") == "halfway"
    assert (after.status, after.worker_id, after.updated_at) == (before.status, before.worker_id, before.updated_at)

    dead = await _found(backend, ids["sealed_dead"])
    assert dead.args_json is not None
    sealed_anew = Cipher([NEW]).seal({"d": 1})
    assert await backend.reseal_row(
        ResealRowParams(table="dead_letter", id=dead.id, args_json=(dead.args_json, _compact(sealed_anew)))
    )
    dead_row = await backend.get_dead_letter(GetDeadLetterParams(job_id=dead.id))
    assert dead_row is not None
    assert dead_row.args == sealed_anew


async def test_reseal_with_a_stale_old_value_writes_nothing(
    backend: SQLiteBackend, make_job: JobFactory, raw: sqlite3.Connection
) -> None:
    ids = await _one_of_each(backend, make_job, raw)
    row = await _found(backend, ids["sealed_progress"])
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
            args_json=(row.args_json, '{"changed":true}'),
            result_json=(stale_result, '{"changed":true}'),
        )
    )
    assert written is False
    assert await _row(backend, row.id) == settled  # not even the args, whose old value matched
    # The same JSON in other text is another value to this store: the texts are compared.
    queued = await _found(backend, ids["sealed_queued_1"])
    assert queued.args_json is not None
    spaced = json.dumps(json.loads(queued.args_json), indent=1)
    assert spaced != queued.args_json
    assert not await backend.reseal_row(
        ResealRowParams(table="jobs", id=queued.id, args_json=(spaced, '{"changed":true}'))
    )
    assert _stored(raw, "soniq_jobs", "args", queued.id) == queued.args_json


async def test_reseal_of_a_missing_row_or_a_field_the_row_lacks_is_false(
    backend: SQLiteBackend, make_job: JobFactory, raw: sqlite3.Connection
) -> None:
    ids = await _one_of_each(backend, make_job, raw)
    text = _compact(SEALER.seal(1))
    assert not await backend.reseal_row(ResealRowParams(table="jobs", id="missing", args_json=(text, text)))
    assert not await backend.reseal_row(ResealRowParams(table="dead_letter", id="missing", args_json=(text, text)))
    queued = await _found(backend, ids["sealed_queued_0"])
    assert queued.args_json is not None
    # The row is a jobs row, not a dead letter.
    assert not await backend.reseal_row(
        ResealRowParams(table="dead_letter", id=queued.id, args_json=(queued.args_json, text))
    )
    # A queued row has no result: an old result never matches, and the args are left too.
    assert not await backend.reseal_row(
        ResealRowParams(table="jobs", id=queued.id, args_json=(queued.args_json, text), result_json=(text, text))
    )
    assert _stored(raw, "soniq_jobs", "args", queued.id) == queued.args_json
    # A dead-letter row keeps no result.
    dead = await _found(backend, ids["sealed_dead"])
    assert dead.args_json is not None
    assert not await backend.reseal_row(
        ResealRowParams(table="dead_letter", id=dead.id, args_json=(dead.args_json, text), result_json=(text, text))
    )
    assert _stored(raw, "soniq_dead_letter_jobs", "args", dead.id) == dead.args_json


async def test_a_foreign_cursor_table_or_limit_is_refused(backend: SQLiteBackend) -> None:
    with pytest.raises(ValueError, match="cursor"):
        await backend.sealed_rows(SealedRowsParams(cursor="elsewhere:1", limit=5))
    with pytest.raises(ValueError, match="limit"):
        await backend.sealed_rows(SealedRowsParams(limit=0))
    with pytest.raises(ValueError, match="table"):
        await backend.reseal_row(ResealRowParams(table="soniq_jobs", id="x", args_json=("{}", "{}")))


async def test_rotation_through_the_app_leaves_only_values_the_new_key_opens(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rotation.db'}"
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
    await old_app.close()

    both = Soniq(url, encryption_keys=[NEW, OLD], observers="")
    backend = await both.connected_backend()
    report = await rotate_keys(backend, Cipher([NEW, OLD]), batch_size=1)
    assert (report.undecryptable, report.rows_changed_meanwhile) == (0, 0)
    assert report.values_resealed == 4  # first: args, result, progress; second: args

    # Every stored sealed value now opens with the new key alone.
    assert isinstance(backend, SQLiteBackend)
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
    await both.close()

    new_app = Soniq(url, encryption_keys=[NEW], observers="")
    declare(new_app)
    assert await new_app.get_result(first) == {"charged": "1111"}
    await run_once(new_app)
    assert ran == ["1111", "2222"]
    assert await new_app.get_result(second) == {"charged": "2222"}
    await new_app.close()
