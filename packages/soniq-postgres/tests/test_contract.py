"""The generic backend contract suite, run through its class form against PostgreSQL."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg
import pytest

from soniq.backend import Backend
from soniq.params import PrepareWorkerParams
from soniq_contract_tests.harness import BackendFactory, UrlBackendFactory
from soniq_contract_tests.suite import BackendContractSuite, CorruptRowWriter, TransactionFactory
from soniq_postgres import PostgresBackend
from soniq_postgres.options import quote_ident
from soniq_postgres.rows import to_json

# The polling variant fixes its pool size, so it can also show that a worker
# the pool cannot serve is refused; the scenarios' workers fit well inside it.
FIXED_POOL = 20


def caller_transaction(url: str) -> TransactionFactory:
    """The application's side of transactional enqueue: its own connection, its own transaction."""

    @contextlib.asynccontextmanager
    async def transaction(backend: Backend) -> AsyncIterator[asyncpg.Connection]:
        connection = await asyncpg.connect(url)
        try:
            async with connection.transaction():
                yield connection
        finally:
            await connection.close()

    return transaction


def raw_args_writer(url: str) -> CorruptRowWriter:
    """Overwrite a row's stored args from outside Soniq.

    The column is `json`, so the server refuses text that is not JSON (or is
    nested past its stack limit); then the closest the store allows is kept:
    that text as a JSON string, which is still not an object.
    """

    async def write(backend: Backend, job_id: str, raw_args: str) -> None:
        assert isinstance(backend, PostgresBackend)
        table = f"{quote_ident(backend.options.schema)}.soniq_jobs"
        connection = await asyncpg.connect(url)
        try:
            try:
                status = await connection.execute(f"UPDATE {table} SET args = $1::json WHERE id = $2", raw_args, job_id)
            except asyncpg.PostgresError:
                status = await connection.execute(
                    f"UPDATE {table} SET args = $1::json WHERE id = $2", to_json(raw_args), job_id
                )
        finally:
            await connection.close()
        assert status == "UPDATE 1", f"no row {job_id}"

    return write


class TestPostgresContract(BackendContractSuite):
    @pytest.fixture
    def soniq_backend_factory(self, pg_url: str) -> BackendFactory:
        # Picklable, as the suite's multi-process claim test requires.
        return UrlBackendFactory(pg_url)

    @pytest.fixture
    def soniq_transaction(self, pg_url: str) -> TransactionFactory:
        return caller_transaction(pg_url)

    @pytest.fixture
    def soniq_corrupt_row(self, pg_url: str) -> CorruptRowWriter:
        return raw_args_writer(pg_url)


class TestPostgresContractPolling(BackendContractSuite):
    """The same contract with LISTEN off, as behind PgBouncer in transaction mode."""

    @pytest.fixture
    def soniq_backend_factory(self, pg_url: str) -> BackendFactory:
        return UrlBackendFactory(pg_url, {"listen": False, "max_size": FIXED_POOL})

    @pytest.fixture
    def soniq_transaction(self, pg_url: str) -> TransactionFactory:
        return caller_transaction(pg_url)

    @pytest.fixture
    def soniq_corrupt_row(self, pg_url: str) -> CorruptRowWriter:
        return raw_args_writer(pg_url)

    @pytest.fixture
    def soniq_unservable_worker(self) -> PrepareWorkerParams:
        return PrepareWorkerParams(concurrency=FIXED_POOL * 3, prefetch=0)


def test_the_url_scheme_resolves_to_this_backend(pg_url: str) -> None:
    backend = UrlBackendFactory(pg_url)("ns_probe")
    assert isinstance(backend, PostgresBackend)
    assert backend.options.schema == "ns_probe"
