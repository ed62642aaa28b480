"""Waiting for jobs: `watch_jobs` and `wait_for_job_changes`.

Every backend returns from `wait_for_job_changes` by its timeout, with None or
the ids among those asked about that it knows changed. A backend that declares
`push_job_changes` also returns promptly when a watched row is finished, or a
cancel is requested, through another backend instance on the same store (the
same instance when the store cannot be shared), well before a long timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from soniq.backend import (
    Backend,
    CancelJobParams,
    CancelOutcome,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeleteJobParams,
    EnqueueJobsParams,
    FinishCancelParams,
    JobRecord,
    JobResult,
    RequestCancelParams,
    WaitForJobChangesParams,
    WatchJobsParams,
)
from soniq_contract_tests.harness import (
    MISSING_JOB_ID,
    ContractHarness,
    enqueue,
    enqueue_and_claim,
    new_job,
)

LONG_TIMEOUT = 10.0
"""The timeout of a wait that a push must end early."""
WAKE_DEADLINE = 3.0
"""How soon after the first change a push-capable backend must have returned."""
QUIET_TIMEOUT = 0.5
RETURN_SLACK = 3.0
"""How late past its timeout any backend may return (a loaded machine)."""
ROWS = 8
"""Rows prepared per wake test: the test finishes one after another until the waiter returns."""

Finisher = Callable[[Backend, JobRecord], Awaitable[None]]


async def _complete(backend: Backend, row: JobRecord) -> None:
    written = await backend.complete_jobs(
        CompleteJobsParams(worker_id="runner", results=[JobResult(job_id=row.id, result={"ok": True})])
    )
    assert written == {row.id}


async def _complete_deleting(backend: Backend, row: JobRecord) -> None:
    written = await backend.complete_jobs(
        CompleteJobsParams(worker_id="runner", results=[JobResult(job_id=row.id, result=None, delete_row=True)])
    )
    assert written == {row.id}


async def _dead_letter(backend: Backend, row: JobRecord) -> None:
    assert await backend.dead_letter_job(
        DeadLetterJobParams(job_id=row.id, worker_id="runner", error="boom", reason="max_retries_exceeded")
    )


async def _finish_cancel(backend: Backend, row: JobRecord) -> None:
    assert await backend.finish_cancel(FinishCancelParams(job_id=row.id, worker_id="runner", message="stopped"))


async def _cancel(backend: Backend, row: JobRecord) -> None:
    assert await backend.cancel_job(CancelJobParams(job_id=row.id))


async def _delete(backend: Backend, row: JobRecord) -> None:
    assert await backend.delete_job(DeleteJobParams(job_id=row.id))


FINISHERS: dict[str, tuple[Finisher, bool]] = {
    # name: (the finishing write, whether it needs a claimed row)
    "complete_jobs": (_complete, True),
    "complete_jobs_delete_row": (_complete_deleting, True),
    "dead_letter_job": (_dead_letter, True),
    "finish_cancel": (_finish_cancel, True),
    "cancel_job": (_cancel, False),
    "delete_job": (_delete, False),
}


@contextlib.asynccontextmanager
async def writer_for(contract: ContractHarness, backend: Backend) -> AsyncIterator[Backend]:
    """Another instance on the same store, or `backend` itself when the store cannot be shared."""
    if backend.capabilities.shared_across_processes:
        async with contract.peer(backend) as other:
            yield other
    else:
        yield backend


async def wait(backend: Backend, job_ids: list[str], timeout: float) -> set[str] | None:
    result = await backend.wait_for_job_changes(WaitForJobChangesParams(job_ids=job_ids, timeout=timeout))
    if result is not None:
        assert isinstance(result, set), f"wait_for_job_changes returned {result!r}: a set of ids or None"
        assert result <= set(job_ids), f"wait_for_job_changes returned {result - set(job_ids)}, ids never asked about"
    return result


async def assert_returns_by_its_timeout(backend: Backend, job_ids: list[str]) -> set[str] | None:
    start = time.monotonic()
    try:
        result = await asyncio.wait_for(wait(backend, job_ids, QUIET_TIMEOUT), QUIET_TIMEOUT + RETURN_SLACK)
    except TimeoutError:
        raise AssertionError(
            f"wait_for_job_changes(timeout={QUIET_TIMEOUT:g}) was still waiting after {time.monotonic() - start:.1f}s"
        ) from None
    return result


async def assert_woken(
    backend: Backend, job_ids: list[str], steps: list[str], act: Callable[[str], Awaitable[None]], what: str
) -> None:
    """Wait `LONG_TIMEOUT` on `job_ids` while `act` changes the next id of `steps` every 0.2 s; the wait
    must end within `WAKE_DEADLINE` of the first change, naming a changed id (or None)."""
    changed: set[str] = set()

    async def waiter() -> set[str] | None:
        while True:
            result = await wait(backend, job_ids, LONG_TIMEOUT)
            if changed and (result is None or result & changed):
                return result
            await asyncio.sleep(0)  # a spurious return before any change: wait again

    task = asyncio.create_task(waiter())
    try:
        await asyncio.sleep(0.1)  # let the waiter start listening before the first change
        first_change: float | None = None
        left = list(steps)
        while not task.done():
            now = time.monotonic()
            if first_change is not None and now - first_change > WAKE_DEADLINE:
                raise AssertionError(
                    f"wait_for_job_changes(timeout={LONG_TIMEOUT:g}) did not return within {WAKE_DEADLINE:g}s "
                    f"of {what}, although the backend declares push_job_changes"
                )
            if left:
                job_id = left.pop(0)
                changed.add(job_id)  # before the write: the waiter may return while it is under way
                first_change = now if first_change is None else first_change
                await act(job_id)
            await asyncio.wait({task}, timeout=0.2)
        result = task.result()
        assert result is None or result & changed, f"woken with {result}, none of the changed ids {changed}"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class JobChangesContract:
    async def test_wait_for_job_changes_returns_by_its_timeout(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue(backend)
            await backend.watch_jobs(WatchJobsParams(job_ids=[row.id]))
            result = await assert_returns_by_its_timeout(backend, [row.id])
            assert result is None or row.id not in result, f"nothing happened to {row.id}, yet it was reported changed"

    async def test_watch_jobs_ignores_unknown_ids(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            await backend.watch_jobs(WatchJobsParams(job_ids=[MISSING_JOB_ID]))
            await assert_returns_by_its_timeout(backend, [MISSING_JOB_ID])

    @pytest.mark.parametrize("finisher", sorted(FINISHERS))
    async def test_a_watched_job_finished_elsewhere_wakes_the_waiter(
        self, contract: ContractHarness, finisher: str
    ) -> None:
        finish, claimed = FINISHERS[finisher]
        async with contract.backend() as backend:
            rows = [
                await (enqueue_and_claim(backend, worker_id="runner") if claimed else enqueue(backend))
                for _ in range(ROWS)
            ]
            if finisher == "finish_cancel":
                for row in rows:
                    assert await backend.request_cancel(RequestCancelParams(job_id=row.id)) is CancelOutcome.REQUESTED
            ids = [row.id for row in rows]
            await backend.watch_jobs(WatchJobsParams(job_ids=ids))
            async with writer_for(contract, backend) as writer:
                if not backend.capabilities.push_job_changes:
                    await assert_returns_by_its_timeout(backend, ids)
                    await finish(writer, rows[0])
                    await assert_returns_by_its_timeout(backend, ids)
                    return
                by_id = {row.id: row for row in rows}

                async def act(job_id: str) -> None:
                    await finish(writer, by_id[job_id])

                await assert_woken(backend, ids, ids, act, f"{finisher} of a watched job")

    async def test_a_watched_dependent_cancelled_by_its_dependency_wakes_the_waiter(
        self, contract: ContractHarness
    ) -> None:
        """The cascade is a finishing write too: `wait_for` on a dependent must not wait out its poll."""
        async with contract.backend() as backend:
            deps = [new_job() for _ in range(ROWS)]
            dependents = [new_job(depends_on=(dep.id,)) for dep in deps]
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[*deps, *dependents]))
            ids = [job.id for job in dependents]
            await backend.watch_jobs(WatchJobsParams(job_ids=ids))
            dep_of = {dependent.id: dep.id for dep, dependent in zip(deps, dependents, strict=True)}
            async with writer_for(contract, backend) as writer:

                async def act(job_id: str) -> None:
                    assert await writer.cancel_job(CancelJobParams(job_id=dep_of[job_id]))

                if not backend.capabilities.push_job_changes:
                    await act(ids[0])
                    await assert_returns_by_its_timeout(backend, ids)
                    return
                await assert_woken(backend, ids, ids, act, "the cancel of a watched job's dependency")

    async def test_a_cancel_request_wakes_the_waiter_without_a_watch(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="runner")
            async with writer_for(contract, backend) as writer:
                if not backend.capabilities.push_job_changes:
                    assert await writer.request_cancel(RequestCancelParams(job_id=row.id)) is CancelOutcome.REQUESTED
                    await assert_returns_by_its_timeout(backend, [row.id])
                    return

                # Idempotent, and every request publishes: ask again until the waiter hears one.
                steps = [row.id] * int(WAKE_DEADLINE / 0.2 + 5)
                await assert_woken(backend, [row.id], steps, _requester(writer), "a cancel request on the job")

    async def test_concurrent_waiters_on_one_instance_are_each_woken(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            rows = [await enqueue_and_claim(backend, worker_id="runner") for _ in range(3)]
            if not backend.capabilities.push_job_changes:
                results = await asyncio.gather(*(assert_returns_by_its_timeout(backend, [row.id]) for row in rows))
                assert all(result is None or result <= {row.id} for result, row in zip(results, rows, strict=True))
                return
            async with writer_for(contract, backend) as writer:
                await asyncio.gather(
                    *(
                        assert_woken(
                            backend,
                            [row.id],
                            [row.id] * int(WAKE_DEADLINE / 0.2 + 5),
                            _requester(writer),
                            "a cancel request on the job",
                        )
                        for row in rows
                    )
                )


def _requester(writer: Backend) -> Callable[[str], Awaitable[None]]:
    async def act(job_id: str) -> None:
        assert await writer.request_cancel(RequestCancelParams(job_id=job_id)) is CancelOutcome.REQUESTED

    return act
