"""Rows whose stored args cannot be decoded: returned with `decode_error`, never raised.

Another producer, an older version or a hand fix may leave a row whose args
are not valid JSON, are nested deeper than a decoder goes, or are not an
object. One such row must not fail the claim that takes it with good rows
(they would stay `processing` under a live worker) nor a listing of the
whole table.

The suite cannot write such a row through the protocol (enqueue refuses it),
so the backend's author provides the optional fixture `soniq_corrupt_row`:
an async callable ``(backend, job_id, raw_args) -> None`` that overwrites the
stored args of an existing queued row with `raw_args`, as text. For the URL
form it is looked up by the URL's scheme in `CORRUPT_ROW_WRITERS` (see
`register_corrupt_row_writer`); without one the tests skip, naming the fixture.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from soniq.backend import Backend
from soniq.params import (
    ClaimJobsParams,
    DeadLetterJobParams,
    EnqueueJobsParams,
    GetDeadLetterParams,
    ListDeadLetterParams,
    ListJobsParams,
)
from soniq.records import DeadLetterReason, JobStatus
from soniq_contract_tests.harness import (
    BackendFactory,
    ContractHarness,
    UrlBackendFactory,
    must_get,
    new_job,
    unique_queue,
)

CorruptRowWriter = Callable[[Backend, str, str], Awaitable[None]]
"""``await writer(backend, job_id, raw_args)``: the stored args of that queued row become `raw_args`, verbatim."""

CORRUPT_ROW_WRITERS: dict[str, Callable[[UrlBackendFactory], CorruptRowWriter]] = {}
"""URL scheme -> builds the `soniq_corrupt_row` writer for a `UrlBackendFactory` of that scheme."""

MISSING_WRITER = (
    "the corrupt-row contract needs a way to store args the protocol refuses: override the fixture "
    "soniq_corrupt_row in {cls} (an async callable (backend, job_id, raw_args: str) -> None that overwrites "
    "the stored args of an existing queued row with that raw text)"
)

DEPTH = 20_000
RAW_ARGS: dict[str, str] = {
    "invalid_json": '{"user_id": 42,',
    "too_deep": "[" * DEPTH + "]" * DEPTH,
    "not_an_object": "[1, 2, 3]",
}


def register_corrupt_row_writer(scheme: str, make: Callable[[UrlBackendFactory], CorruptRowWriter]) -> None:
    """Let the URL form corrupt rows of `scheme` (a backend package may call this from its plugin)."""
    CORRUPT_ROW_WRITERS[scheme.lower()] = make


def _memory_writer(factory: UrlBackendFactory) -> CorruptRowWriter:
    async def write(backend: Backend, job_id: str, raw_args: str) -> None:
        put_raw_args: Callable[[str, str], None] = getattr(backend, "put_raw_args")  # noqa: B009
        put_raw_args(job_id, raw_args)

    return write


def _redis_writer(factory: UrlBackendFactory) -> CorruptRowWriter:
    async def write(backend: Backend, job_id: str, raw_args: str) -> None:
        from soniq_redis.connection import RedisTarget

        client = RedisTarget.parse(factory.url, {}).client()
        try:
            key: str = getattr(backend, "keys").job(job_id)  # noqa: B009
            if not await client.exists(key):
                raise AssertionError(f"no Redis hash {key!r} for job {job_id}")
            await client.hset(key, "args", raw_args)
        finally:
            await client.aclose()

    return write


def _sqlite_writer(factory: UrlBackendFactory) -> CorruptRowWriter:
    async def write(backend: Backend, job_id: str, raw_args: str) -> None:
        import asyncio
        import sqlite3

        path = getattr(getattr(backend, "location", None), "path", None)
        if path is None:
            raise AssertionError("an in-memory SQLite database cannot be reached from a second connection")

        def update() -> int:
            with contextlib.closing(sqlite3.connect(path, timeout=10, isolation_level=None)) as connection:
                cursor = connection.execute("UPDATE soniq_jobs SET args = ? WHERE id = ?", (raw_args, job_id))
                return cursor.rowcount

        if await asyncio.to_thread(update) != 1:
            raise AssertionError(f"no soniq_jobs row {job_id} in {path}")

    return write


def _postgres_writer(factory: UrlBackendFactory) -> CorruptRowWriter:
    parts = urlsplit(factory.url)
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, "", ""))

    async def write(backend: Backend, job_id: str, raw_args: str) -> None:
        import asyncpg

        schema: str = getattr(backend, "options").schema  # noqa: B009
        table = '"' + schema.replace('"', '""') + '".soniq_jobs'
        connection = await asyncpg.connect(dsn, statement_cache_size=0)  # safe behind PgBouncer too
        try:
            try:
                status = await connection.execute(f"UPDATE {table} SET args = $1::json WHERE id = $2", raw_args, job_id)
            except asyncpg.PostgresError:
                # A json column refuses text that is not JSON (or nests past the server's stack):
                # store it as a JSON string instead, which is still not an object.
                status = await connection.execute(
                    f"UPDATE {table} SET args = $1::json WHERE id = $2", json.dumps(raw_args), job_id
                )
        finally:
            await connection.close()
        if status != "UPDATE 1":
            raise AssertionError(f"no soniq_jobs row {job_id} in schema {schema!r}")

    return write


register_corrupt_row_writer("memory", _memory_writer)
register_corrupt_row_writer("redis", _redis_writer)
register_corrupt_row_writer("rediss", _redis_writer)
register_corrupt_row_writer("sqlite", _sqlite_writer)
register_corrupt_row_writer("postgresql", _postgres_writer)
register_corrupt_row_writer("postgres", _postgres_writer)


def _scheme(url: str) -> str:
    return urlsplit(url).scheme.split("+", 1)[0].lower()


class CorruptRowContract:
    @pytest.fixture
    def soniq_corrupt_row(self, soniq_backend_factory: BackendFactory) -> CorruptRowWriter | None:
        """Looked up by scheme for a `UrlBackendFactory`; otherwise None until the author overrides it."""
        if isinstance(soniq_backend_factory, UrlBackendFactory):
            make = CORRUPT_ROW_WRITERS.get(_scheme(soniq_backend_factory.url))
            if make is not None:
                return make(soniq_backend_factory)
        return None

    def _writer(self, soniq_corrupt_row: CorruptRowWriter | None) -> CorruptRowWriter:
        if soniq_corrupt_row is None:
            pytest.skip(MISSING_WRITER.format(cls=type(self).__name__))
        return soniq_corrupt_row

    async def _three_rows_one_corrupt(
        self, backend: Backend, writer: CorruptRowWriter, raw: str
    ) -> tuple[str, list[str], dict[str, Any]]:
        """Three queued rows on a queue of their own; the middle one's args overwritten with `raw`."""
        queue = unique_queue("corrupt")
        jobs = [new_job(queue=queue, priority=10 * (n + 1), args={"n": n}) for n in range(3)]
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
        await writer(backend, jobs[1].id, raw)
        return jobs[1].id, [jobs[0].id, jobs[2].id], {job.id: dict(job.args) for job in jobs}

    @pytest.mark.parametrize("kind", sorted(RAW_ARGS))
    async def test_a_claim_returns_a_corrupt_row_with_decode_error_beside_the_good_ones(
        self, contract: ContractHarness, soniq_corrupt_row: CorruptRowWriter | None, kind: str
    ) -> None:
        writer = self._writer(soniq_corrupt_row)
        async with contract.backend() as backend:
            bad, good, args = await self._three_rows_one_corrupt(backend, writer, RAW_ARGS[kind])
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=None, limit=10, mark_started=False)
            )
            by_id = {row.id: row for row in claimed}
            assert sorted(by_id) == sorted([bad, *good]), "the claim must return every due row, the corrupt one too"
            assert by_id[bad].decode_error, f"the row with {kind} args must come back with decode_error set"
            assert dict(by_id[bad].args) == {}
            assert by_id[bad].status is JobStatus.PROCESSING
            for job_id in good:
                assert by_id[job_id].decode_error is None
                assert dict(by_id[job_id].args) == args[job_id]
                assert (await must_get(backend, job_id)).status is JobStatus.PROCESSING

    @pytest.mark.parametrize("kind", sorted(RAW_ARGS))
    async def test_listings_and_get_job_show_a_corrupt_row(
        self, contract: ContractHarness, soniq_corrupt_row: CorruptRowWriter | None, kind: str
    ) -> None:
        writer = self._writer(soniq_corrupt_row)
        async with contract.backend() as backend:
            bad, good, args = await self._three_rows_one_corrupt(backend, writer, RAW_ARGS[kind])
            fetched = await must_get(backend, bad)
            assert fetched.decode_error
            assert dict(fetched.args) == {}
            for include_results in (False, True):
                listed = await backend.list_jobs(ListJobsParams(include_results=include_results))
                by_id = {row.id: row for row in listed}
                assert sorted(by_id) == sorted([bad, *good])
                assert by_id[bad].decode_error
                assert all(by_id[job_id].decode_error is None for job_id in good)
                assert all(dict(by_id[job_id].args) == args[job_id] for job_id in good)

    @pytest.mark.parametrize("kind", sorted(RAW_ARGS))
    async def test_dead_letter_listing_and_get_show_a_corrupt_row(
        self, contract: ContractHarness, soniq_corrupt_row: CorruptRowWriter | None, kind: str
    ) -> None:
        writer = self._writer(soniq_corrupt_row)
        async with contract.backend() as backend:
            bad, good, args = await self._three_rows_one_corrupt(backend, writer, RAW_ARGS[kind])
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=None, limit=10, mark_started=False)
            )
            assert len(claimed) == 3
            for job_id in (bad, *good):
                assert await backend.dead_letter_job(
                    DeadLetterJobParams(
                        job_id=job_id, worker_id="w1", error="decode failed", reason=DeadLetterReason.CORRUPT_ROW.value
                    )
                )
            listed = {row.id: row for row in await backend.list_dead_letter(ListDeadLetterParams())}
            assert sorted(listed) == sorted([bad, *good])
            assert listed[bad].decode_error
            assert dict(listed[bad].args) == {}
            assert listed[bad].dead_letter_reason == DeadLetterReason.CORRUPT_ROW.value
            for job_id in good:
                assert listed[job_id].decode_error is None
                assert dict(listed[job_id].args) == args[job_id]
            dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=bad))
            assert dead is not None
            assert dead.decode_error
            assert dict(dead.args) == {}
