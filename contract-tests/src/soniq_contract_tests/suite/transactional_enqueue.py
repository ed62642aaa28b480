"""`enqueue_jobs` with `connection`: the insert joins the caller's transaction, commit or rollback.

Checked only for a backend whose `capabilities.transactional_enqueue` is
true. The suite cannot open a driver transaction on a store it does not
know, so the backend lends one: the `soniq_transaction` fixture, by default
the ``transaction`` its package registers in the entry-point group
``soniq_contract_tests.fixtures`` (see `soniq_contract_tests.backend_fixtures`),
or a class form's own override.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from soniq.backend import Backend, EnqueueJobsParams, GetJobParams, JobStatus, QueueStatsParams
from soniq_contract_tests.backend_fixtures import TransactionFactory, fixtures_for
from soniq_contract_tests.harness import ContractHarness, must_get, new_job

MISSING_TRANSACTION = (
    "{backend} reports capabilities.transactional_enqueue=True, so the suite must check that enqueue_jobs "
    "joins the caller's transaction: register a transaction for it in the entry-point group "
    "soniq_contract_tests.fixtures, or override the fixture soniq_transaction in {cls} (return a callable "
    "taking the backend and returning an async context manager that yields a driver connection inside an "
    "open transaction, committing on exit and rolling back on error)"
)


class _RollbackError(Exception):
    """Raised inside the caller's transaction to make it roll back."""


class TransactionalEnqueueContract:
    @pytest.fixture
    def soniq_transaction(self, soniq_backend_probe: Backend) -> TransactionFactory | None:
        """The transaction registered for the backend's class; None until the author registers or overrides one."""
        registration = fixtures_for(soniq_backend_probe)
        return None if registration is None else registration.transaction

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
