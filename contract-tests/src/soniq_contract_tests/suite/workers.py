"""Worker rows (register, heartbeat, list) and `wait_for_jobs`."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from soniq.backend import (
    Backend,
    EnqueueJobsParams,
    HeartbeatParams,
    PrepareWorkerParams,
    RegisterWorkerParams,
    SetWorkerStatusParams,
    WaitForJobsParams,
    WorkerStatus,
)
from soniq.errors import SoniqError
from soniq_contract_tests.harness import (
    ContractHarness,
    assert_between,
    enqueue_and_claim,
    new_job,
    register,
    utc_now,
    wait_until,
    worker_info,
)

WAKE_DEADLINE_SECONDS = 10.0


class WorkerContract:
    async def test_register_worker_creates_an_active_row(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            info = worker_info("w-reg", queues=("emails", "reports"))
            before = utc_now()
            await backend.register_worker(RegisterWorkerParams(worker=info))
            after = utc_now()
            (row,) = await backend.list_workers()
            assert (row.id, row.hostname, row.pid, row.concurrency) == (
                "w-reg",
                info.hostname,
                info.pid,
                info.concurrency,
            )
            assert tuple(row.queues or ()) == ("emails", "reports")
            assert row.status is WorkerStatus.ACTIVE
            assert_between(row.last_heartbeat, before, after, contract.slack(backend), "last_heartbeat")
            assert_between(row.started_at, before, after, contract.slack(backend), "started_at")

    async def test_register_worker_serving_every_queue_stores_none(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            await backend.register_worker(RegisterWorkerParams(worker=worker_info("w-all", queues=None)))
            (row,) = await backend.list_workers()
            assert row.queues is None

    async def test_registering_again_replaces_the_row(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            await register(backend, "w1")
            assert await backend.set_worker_status(SetWorkerStatusParams(worker_id="w1", status=WorkerStatus.STOPPED))
            await backend.register_worker(RegisterWorkerParams(worker=worker_info("w1", queues=("only",))))
            (row,) = await backend.list_workers()
            assert row.status is WorkerStatus.ACTIVE
            assert tuple(row.queues or ()) == ("only",)

    async def test_heartbeat_refreshes_last_heartbeat_and_sets_status(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            await register(backend, "w1")
            (first,) = await backend.list_workers()
            before = utc_now()
            assert (
                await backend.set_worker_status(SetWorkerStatusParams(worker_id="w1", status=WorkerStatus.STOPPING))
                is True
            )
            after = utc_now()
            (beat,) = await backend.list_workers()
            assert beat.status is WorkerStatus.STOPPING
            assert beat.last_heartbeat >= first.last_heartbeat
            assert_between(beat.last_heartbeat, before, after, contract.slack(backend), "last_heartbeat")
            assert await backend.heartbeat(HeartbeatParams(worker_id="w1")) is True
            (again,) = await backend.list_workers()
            assert again.status is WorkerStatus.STOPPING

    async def test_heartbeat_of_an_unknown_worker_returns_false(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            assert await backend.heartbeat(HeartbeatParams(worker_id="nobody")) is False
            assert await backend.list_workers() == []

    async def test_list_workers_lists_every_worker(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            for worker_id in ("a", "b", "c"):
                await register(backend, worker_id)
            assert sorted(worker.id for worker in await backend.list_workers()) == ["a", "b", "c"]


class WaitForJobsContract:
    async def test_wait_for_jobs_returns_by_its_timeout(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            try:
                await asyncio.wait_for(
                    backend.wait_for_jobs(WaitForJobsParams(queues=None, timeout=0.2)), WAKE_DEADLINE_SECONDS
                )
            except TimeoutError:
                raise AssertionError(
                    f"wait_for_jobs(timeout=0.2) was still waiting after {WAKE_DEADLINE_SECONDS:g}s"
                ) from None

    async def test_wait_for_jobs_wakes_on_an_enqueue(self, contract: ContractHarness) -> None:
        """With push wake-up, a long wait ends soon after an enqueue (from another backend
        instance on the namespace when the store is shared); without it, by its timeout."""
        async with contract.backend() as backend:
            push = backend.capabilities.push_wakeup
            timeout = 60.0 if push else 0.5
            async with contextlib.AsyncExitStack() as stack:
                producer: Backend = backend
                if backend.capabilities.shared_across_processes:
                    producer = await stack.enter_async_context(contract.peer(backend))
                waiter = asyncio.create_task(backend.wait_for_jobs(WaitForJobsParams(queues=["wake"], timeout=timeout)))

                async def woken() -> bool:
                    if not waiter.done():
                        # Enqueue again and again: the waiter may not be listening yet.
                        await producer.enqueue_jobs(EnqueueJobsParams(jobs=[new_job(queue="wake")]))
                    return waiter.done()

                try:
                    await wait_until(
                        woken,
                        deadline=WAKE_DEADLINE_SECONDS,
                        interval=0.1,
                        message=f"wait_for_jobs(timeout={timeout:g}) did not return after enqueues"
                        + (" although the backend declares push_wakeup" if push else ""),
                    )
                finally:
                    waiter.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await waiter


SANE_WORKERS = (PrepareWorkerParams(concurrency=1, prefetch=0), PrepareWorkerParams(concurrency=2, prefetch=2))
"""Shapes every backend built with its defaults must serve."""


class PrepareWorkerContract:
    @pytest.fixture
    def soniq_unservable_worker(self) -> PrepareWorkerParams | None:
        """A `concurrency`/`prefetch` that the factory's backend declares it cannot serve; None when it has no limit."""
        return None

    async def test_prepare_worker_accepts_a_sane_concurrency_and_prefetch(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            for params in SANE_WORKERS:
                await backend.prepare_worker(params)
            # Still a working store afterwards.
            await register(backend, "prepared-worker")
            row = await enqueue_and_claim(backend, worker_id="prepared-worker")
            assert row.worker_id == "prepared-worker"

    async def test_prepare_worker_refuses_what_it_cannot_serve_with_a_soniq_error(
        self, contract: ContractHarness, soniq_unservable_worker: PrepareWorkerParams | None
    ) -> None:
        if soniq_unservable_worker is None:
            pytest.skip(
                "the backend declares no worker limit: override the fixture soniq_unservable_worker with a "
                "PrepareWorkerParams it cannot serve to check that prepare_worker refuses it"
            )
        async with contract.backend() as backend:
            with pytest.raises(SoniqError) as refused:
                await backend.prepare_worker(soniq_unservable_worker)
            assert str(refused.value).strip(), "the SoniqError must say how to fix the setting"
            # Refusing leaves the store usable.
            assert await backend.list_workers() == []
