"""`enqueue_jobs` with `connection`: the insert joins the caller's transaction, commit or rollback.

Checked only for a backend whose `capabilities.transactional_enqueue` is
true. The suite cannot open a driver transaction on a store it does not
know, so the backend's author provides one through the `soniq_transaction`
fixture. For a `UrlBackendFactory` on a PostgreSQL URL (the URL form, and
class forms built on one) the default opens an asyncpg connection itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from soniq.backend import Backend
from soniq.params import EnqueueJobsParams, GetJobParams, QueueStatsParams
from soniq.records import JobStatus
from soniq_contract_tests.harness import BackendFactory, ContractHarness, UrlBackendFactory, must_get, new_job

TransactionFactory = Callable[[Backend], AbstractAsyncContextManager[Any]]
"""Given the backend under test (connected and set up in its namespace), opens a
driver connection to the same store, begins a transaction and yields that
connection; commits when the block exits normally and rolls back when it
raises. The suite passes what it yields as `EnqueueJobsParams.connection`."""

MISSING_TRANSACTION = (
    "{backend} reports capabilities.transactional_enqueue=True, so the suite must check that enqueue_jobs "
    "joins the caller's transaction: override the fixture soniq_transaction in {cls} (return a callable "
    "taking the backend and returning an async context manager that yields a driver connection inside an "
    "open transaction, committing on exit and rolling back on error)"
)


POSTGRES_SCHEMES = ("postgresql", "postgres")


def postgres_transaction(url: str) -> TransactionFactory:
    """A transaction on a fresh asyncpg connection to `url`, without Soniq's own query parameters."""
    parts = urlsplit(url)
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, "", ""))

    @contextlib.asynccontextmanager
    async def transaction(backend: Backend) -> AsyncIterator[Any]:
        import asyncpg

        # No statement cache: behind PgBouncer in transaction mode, named prepared statements outlive
        # the transaction on a shared server connection and collide with the next client's.
        connection = await asyncpg.connect(dsn, statement_cache_size=0)
        try:
            async with connection.transaction():
                yield connection
        finally:
            await connection.close()

    return transaction


class _RollbackError(Exception):
    """Raised inside the caller's transaction to make it roll back."""


class TransactionalEnqueueContract:
    @pytest.fixture
    def soniq_transaction(self, soniq_backend_factory: BackendFactory) -> TransactionFactory | None:
        """Derived for a `UrlBackendFactory` on PostgreSQL; otherwise None until the author overrides it."""
        if isinstance(soniq_backend_factory, UrlBackendFactory):
            scheme = urlsplit(soniq_backend_factory.url).scheme.split("+", 1)[0].lower()
            if scheme in POSTGRES_SCHEMES:
                return postgres_transaction(soniq_backend_factory.url)
        return None

    @contextlib.asynccontextmanager
    async def _transactional_backend(
        self, contract: ContractHarness, soniq_transaction: TransactionFactory | None
    ) -> AsyncIterator[tuple[Backend, TransactionFactory]]:
        async with contract.backend() as backend:
            if not backend.capabilities.transactional_enqueue:
                name = type(backend).__name__
                pytest.skip(f"{name} has no transactional enqueue (capabilities.transactional_enqueue is False)")
            if soniq_transaction is None:
                pytest.fail(MISSING_TRANSACTION.format(backend=type(backend).__name__, cls=type(self).__name__))
            yield backend, soniq_transaction

    async def test_transactional_enqueue_is_invisible_until_the_caller_commits(
        self, contract: ContractHarness, soniq_transaction: TransactionFactory | None
    ) -> None:
        async with self._transactional_backend(contract, soniq_transaction) as (backend, transaction):
            jobs = [new_job(), new_job()]
            async with transaction(backend) as connection:
                await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs, connection=connection))
                for job in jobs:
                    assert await backend.get_job(GetJobParams(job_id=job.id)) is None, (
                        f"job {job.id} is visible outside the caller's open transaction: "
                        "enqueue_jobs committed on its own"
                    )
            for job in jobs:
                row = await must_get(backend, job.id)
                assert (row.status, row.attempts, row.worker_id) == (JobStatus.QUEUED, 0, None)

    async def test_transactional_enqueue_is_undone_by_the_callers_rollback(
        self, contract: ContractHarness, soniq_transaction: TransactionFactory | None
    ) -> None:
        async with self._transactional_backend(contract, soniq_transaction) as (backend, transaction):
            jobs = [new_job(), new_job()]
            with contextlib.suppress(_RollbackError):
                async with transaction(backend) as connection:
                    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs, connection=connection))
                    raise _RollbackError
            for job in jobs:
                assert await backend.get_job(GetJobParams(job_id=job.id)) is None, (
                    f"job {job.id} exists although the caller's transaction rolled back"
                )
            assert (await backend.queue_stats(QueueStatsParams())).total == 0
