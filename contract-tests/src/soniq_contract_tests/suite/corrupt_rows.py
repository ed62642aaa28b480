"""Rows whose stored args cannot be decoded: returned with `decode_error`, never raised.

Another producer, an older version or a hand fix may leave a row whose args
are not valid JSON, are nested deeper than a decoder goes, or are not an
object. One such row must not fail the claim that takes it with good rows
(they would stay `processing` under a live worker) nor a listing of the
whole table.

The suite cannot write such a row through the protocol (enqueue refuses it),
so the backend lends it a writer: the optional fixture `soniq_corrupt_row`,
an async callable ``(backend, job_id, raw_args) -> None`` that overwrites the
stored args of an existing queued row with `raw_args`, as text. By default it
is the ``corrupt_row`` the backend's package registers in the entry-point
group ``soniq_contract_tests.fixtures`` (see `soniq_contract_tests.backend_fixtures`);
a class form may override the fixture instead. Without either the tests skip,
naming the fixture.

`memory_corrupt_row` below is the worked example: the memory backend's writer,
registered here for ``soniq_memory.backend:MemoryBackend`` behind every other
registration (soniq-memory registers the same through its entry point).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import pytest

from soniq.backend import (
    Backend,
    ClaimJobsParams,
    DeadLetterJobParams,
    DeadLetterPageParams,
    DeadLetterReason,
    EnqueueJobsParams,
    GetDeadLetterParams,
    JobPageParams,
    JobStatus,
)
from soniq_contract_tests.backend_fixtures import ContractFixtures, CorruptRowWriter, fixtures_for_class
from soniq_contract_tests.harness import (
    BackendFactory,
    ContractHarness,
    UrlBackendFactory,
    must_get,
    new_job,
    unique_queue,
)

MISSING_WRITER = (
    "the corrupt-row contract needs a way to store args the protocol refuses: register a corrupt_row "
    "writer for {backend} in the entry-point group soniq_contract_tests.fixtures, or override the fixture "
    "soniq_corrupt_row in {cls} (an async callable (backend, job_id, raw_args: str) -> None that overwrites "
    "the stored args of an existing queued row with that raw text)"
)

DEPTH = 20_000
RAW_ARGS: dict[str, str] = {
    "invalid_json": '{"user_id": 42,',
    "too_deep": "[" * DEPTH + "]" * DEPTH,
    "not_an_object": "[1, 2, 3]",
}


async def memory_corrupt_row(backend: Backend, job_id: str, raw_args: str) -> None:
    """The worked example: the memory store keeps raw args through its public test API."""
    put_raw_args: Callable[[str, str], None] = getattr(backend, "put_raw_args")  # noqa: B009
    put_raw_args(job_id, raw_args)


MEMORY_EXAMPLE = ContractFixtures(
    "the suite's worked example (soniq_contract_tests.suite.corrupt_rows)",
    "soniq_memory.backend:MemoryBackend",
    corrupt_row=memory_corrupt_row,
)
"""Used only when no registration serves the memory backend."""


def corrupt_row_writer_for(backend_type: type[Any]) -> CorruptRowWriter | None:
    """The writer registered for `backend_type` (the worked example for memory), or None."""
    registration = fixtures_for_class(backend_type)
    if registration is not None and registration.corrupt_row is not None:
        return registration.corrupt_row
    if MEMORY_EXAMPLE.serves(backend_type) is not None:
        return MEMORY_EXAMPLE.corrupt_row
    return None


_by_scheme: dict[str, Callable[[UrlBackendFactory], CorruptRowWriter]] = {}


def register_corrupt_row_writer(scheme: str, make: Callable[[UrlBackendFactory], CorruptRowWriter]) -> None:
    """Serve URLs of `scheme` with `make(factory)`, ahead of the registrations by class. Kept from the
    first form of 0.2.0; a backend package registers in the entry-point group soniq_contract_tests.fixtures."""
    _by_scheme[scheme.lower()] = make


def url_scheme(url: str) -> str:
    return urlsplit(url).scheme.split("+", 1)[0].lower()


class _WritersByScheme(Mapping[str, Callable[[UrlBackendFactory], CorruptRowWriter]]):
    """URL scheme -> builds the writer for a `UrlBackendFactory` of that scheme: the one registered for
    the scheme, else the one registered for the class that ``soniq.backends`` installs for it."""

    def __getitem__(self, scheme: str) -> Callable[[UrlBackendFactory], CorruptRowWriter]:
        scheme = scheme.lower()
        if scheme in _by_scheme:
            return _by_scheme[scheme]
        from soniq.backend import backend_class_for

        try:
            backend_class = backend_class_for(f"{scheme}://")
        except Exception:
            raise KeyError(scheme) from None
        writer = corrupt_row_writer_for(backend_class)
        if writer is None:
            raise KeyError(scheme)
        return lambda factory: writer

    def __iter__(self) -> Iterator[str]:
        from soniq.backend import installed_schemes

        return iter(sorted(scheme for scheme in {*_by_scheme, *installed_schemes()} if scheme in self))

    def __contains__(self, scheme: object) -> bool:
        if not isinstance(scheme, str):
            return False
        try:
            self[scheme]
        except KeyError:
            return False
        return True

    def __len__(self) -> int:
        return sum(1 for _ in self)


CORRUPT_ROW_WRITERS: Mapping[str, Callable[[UrlBackendFactory], CorruptRowWriter]] = _WritersByScheme()
"""URL scheme -> builds the `soniq_corrupt_row` writer for a `UrlBackendFactory` of that scheme (the
chaos runs look writers up here)."""


class CorruptRowContract:
    @pytest.fixture
    def soniq_corrupt_row(
        self, soniq_backend_factory: BackendFactory, soniq_backend_probe: Backend
    ) -> CorruptRowWriter | None:
        """The writer registered for the backend's class (or, for a `UrlBackendFactory`, for its scheme
        through `register_corrupt_row_writer`); None until the author registers or overrides one."""
        if isinstance(soniq_backend_factory, UrlBackendFactory):
            make = _by_scheme.get(url_scheme(soniq_backend_factory.url))
            if make is not None:
                return make(soniq_backend_factory)
        return corrupt_row_writer_for(type(soniq_backend_probe))

    def _writer(self, soniq_corrupt_row: CorruptRowWriter | None, backend: Backend) -> CorruptRowWriter:
        if soniq_corrupt_row is None:
            pytest.skip(MISSING_WRITER.format(backend=type(backend).__name__, cls=type(self).__name__))
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
        async with contract.backend() as backend:
            writer = self._writer(soniq_corrupt_row, backend)
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
        async with contract.backend() as backend:
            writer = self._writer(soniq_corrupt_row, backend)
            bad, good, args = await self._three_rows_one_corrupt(backend, writer, RAW_ARGS[kind])
            fetched = await must_get(backend, bad)
            assert fetched.decode_error
            assert dict(fetched.args) == {}
            for include_results in (False, True):
                listed = await backend.job_page(JobPageParams(include_results=include_results))
                by_id = {row.id: row for row in listed.rows}
                assert sorted(by_id) == sorted([bad, *good])
                assert by_id[bad].decode_error
                assert all(by_id[job_id].decode_error is None for job_id in good)
                assert all(dict(by_id[job_id].args) == args[job_id] for job_id in good)

    @pytest.mark.parametrize("kind", sorted(RAW_ARGS))
    async def test_dead_letter_listing_and_get_show_a_corrupt_row(
        self, contract: ContractHarness, soniq_corrupt_row: CorruptRowWriter | None, kind: str
    ) -> None:
        async with contract.backend() as backend:
            writer = self._writer(soniq_corrupt_row, backend)
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
            listed = {row.id: row for row in (await backend.dead_letter_page(DeadLetterPageParams())).rows}
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
