"""Stale-worker recovery on the real clock: only stale workers' rows, settled by whether they started."""

from __future__ import annotations

from soniq.records import JobStatus, StaleJobPolicy, WorkerStatus
from soniq_contract_tests.harness import (
    ContractHarness,
    assert_between,
    enqueue_and_claim,
    enqueue_with_history,
    heartbeating,
    must_get,
    register,
    sweep_until_stale,
    utc_now,
    wait_until,
)


class StaleRecoveryContract:
    async def test_stale_recovery_requeues_only_stale_workers(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            live = await register(backend, "live-worker")
            stale_rows = [await enqueue_and_claim(backend, worker_id=stale) for _ in range(2)]
            live_rows = [await enqueue_and_claim(backend, worker_id=live) for _ in range(2)]
            async with heartbeating(backend, [live]):
                result, _ = await sweep_until_stale(contract, backend, stale_worker=stale)
            assert result.stale_workers == (stale,)
            assert sorted(result.requeued) == sorted(row.id for row in stale_rows)
            assert result.dead_lettered == ()
            for row in stale_rows:
                recovered = await must_get(backend, row.id)
                assert recovered.status is JobStatus.QUEUED
                assert recovered.worker_id is None
            for row in live_rows:
                untouched = await must_get(backend, row.id)
                assert untouched.status is JobStatus.PROCESSING
                assert untouched.worker_id == live

    async def test_stale_recovery_marks_the_stale_worker_stopped(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            live = await register(backend, "live-worker")
            async with heartbeating(backend, [live]):
                await sweep_until_stale(contract, backend, stale_worker=stale)
            statuses = {worker.id: worker.status for worker in await backend.list_workers()}
            assert statuses == {stale: WorkerStatus.STOPPED, live: WorkerStatus.ACTIVE}
            assert await backend.heartbeat(worker_id=stale) is False
            again = await backend.recover_stale_workers(
                heartbeat_timeout=contract.heartbeat_timeout, policy=StaleJobPolicy.REQUEUE
            )
            assert stale not in again.stale_workers

    async def test_stale_recovery_settles_rows_left_by_a_worker_that_marked_itself_stopped(
        self, contract: ContractHarness
    ) -> None:
        # A worker that could not write an outcome and still marked itself stopped must not strand the row.
        async with contract.backend() as backend:
            gone = await register(backend, "stopped-worker")
            row = await enqueue_and_claim(backend, worker_id=gone, mark_started=True)
            assert await backend.heartbeat(worker_id=gone, status=WorkerStatus.STOPPED) is True

            async def recovered() -> bool:
                result = await backend.recover_stale_workers(
                    heartbeat_timeout=contract.heartbeat_timeout, policy=StaleJobPolicy.REQUEUE
                )
                return row.id in result.requeued

            await wait_until(recovered, deadline=contract.stale_deadline, message="the stopped worker's row recovered")
            settled = await must_get(backend, row.id)
            assert (settled.status, settled.worker_id, settled.attempts) == (JobStatus.QUEUED, None, row.attempts + 1)

    async def test_stale_recovery_never_touches_live_workers_rows(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            live = await register(backend, "live-worker")
            started = await enqueue_and_claim(backend, worker_id=live, mark_started=True)
            unstarted = await enqueue_and_claim(backend, worker_id=live, mark_started=False)
            # Registered after the live worker's claims, so once it is stale those rows are
            # older than the timeout too: only the live worker's heartbeat protects them.
            witness = await register(backend, "witness-worker")
            async with heartbeating(backend, [live]):
                first, earlier = await sweep_until_stale(contract, backend, stale_worker=witness)
                later = [
                    await backend.recover_stale_workers(heartbeat_timeout=contract.heartbeat_timeout, policy=policy)
                    for policy in (StaleJobPolicy.DEAD_LETTER, StaleJobPolicy.REQUEUE, StaleJobPolicy.DEAD_LETTER)
                ]
            for result in [first, *earlier, *later]:
                assert live not in result.stale_workers
                assert not {started.id, unstarted.id} & set(result.requeued + result.dead_lettered)
            assert await must_get(backend, started.id) == started
            assert await must_get(backend, unstarted.id) == unstarted
            assert {w.id: w.status for w in await backend.list_workers()}[live] is WorkerStatus.ACTIVE

    async def test_stale_recovery_counts_an_attempt_for_a_started_row(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            claimed = await enqueue_and_claim(backend, worker_id=stale, max_attempts=3)
            assert await backend.mark_started(job_id=claimed.id, worker_id=stale) is True
            before = utc_now()
            result, _ = await sweep_until_stale(contract, backend, stale_worker=stale)
            after = utc_now()
            assert result.requeued == (claimed.id,)
            recovered = await must_get(backend, claimed.id)
            assert recovered.status is JobStatus.QUEUED
            assert recovered.attempts == 1
            assert recovered.worker_id is None
            assert recovered.last_error is not None
            assert stale in recovered.last_error
            assert_between(recovered.scheduled_at, before, after, contract.slack(backend), "scheduled_at")

    async def test_stale_recovery_does_not_count_an_attempt_for_an_unstarted_row(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            failed_once = await enqueue_with_history(backend, error="first run failed")
            await backend.claim_jobs(worker_id=stale, queues=[failed_once.queue], limit=1, mark_started=False)
            before = utc_now()
            result, _ = await sweep_until_stale(contract, backend, stale_worker=stale)
            after = utc_now()
            assert result.requeued == (failed_once.id,)
            recovered = await must_get(backend, failed_once.id)
            assert recovered.status is JobStatus.QUEUED
            assert recovered.attempts == 1
            assert recovered.last_error == "first run failed"
            assert recovered.worker_id is None
            assert recovered.started_at is None
            assert_between(recovered.scheduled_at, before, after, contract.slack(backend), "scheduled_at")

    async def test_stale_recovery_dead_letters_started_row_as_zombie_under_dead_letter_policy(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            claimed = await enqueue_and_claim(backend, worker_id=stale, mark_started=True, max_attempts=5)
            result, _ = await sweep_until_stale(
                contract, backend, stale_worker=stale, policy=StaleJobPolicy.DEAD_LETTER
            )
            assert result.dead_lettered == (claimed.id,)
            assert result.requeued == ()
            assert await backend.get_job(job_id=claimed.id) is None
            dead = await backend.get_dead_letter(job_id=claimed.id)
            assert dead is not None
            assert dead.dead_letter_reason == "zombie"
            assert dead.attempts == 1

    async def test_stale_recovery_never_dead_letters_an_unstarted_row(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            claimed = await enqueue_and_claim(backend, worker_id=stale, mark_started=False, max_attempts=1)
            result, _ = await sweep_until_stale(
                contract, backend, stale_worker=stale, policy=StaleJobPolicy.DEAD_LETTER
            )
            assert result.requeued == (claimed.id,)
            assert result.dead_lettered == ()
            assert await backend.get_dead_letter(job_id=claimed.id) is None
            recovered = await must_get(backend, claimed.id)
            assert recovered.status is JobStatus.QUEUED
            assert recovered.attempts == 0

    async def test_stale_recovery_dead_letters_at_max_attempts_as_worker_lost(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            claimed = await enqueue_and_claim(backend, worker_id=stale, mark_started=True, max_attempts=1)
            result, _ = await sweep_until_stale(contract, backend, stale_worker=stale)
            assert result.dead_lettered == (claimed.id,)
            assert await backend.get_job(job_id=claimed.id) is None
            dead = await backend.get_dead_letter(job_id=claimed.id)
            assert dead is not None
            assert dead.dead_letter_reason == "worker_lost"
            assert dead.attempts == 1

    async def test_stale_recovery_requeues_rows_of_an_unregistered_worker(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="never-registered", mark_started=False)

            async def requeued() -> bool:
                await backend.recover_stale_workers(
                    heartbeat_timeout=contract.heartbeat_timeout, policy=StaleJobPolicy.REQUEUE
                )
                return (await must_get(backend, claimed.id)).status is JobStatus.QUEUED

            await wait_until(
                requeued,
                deadline=contract.stale_deadline,
                interval=contract.heartbeat_timeout / 5,
                message="a processing row of a worker id with no worker row was never recovered",
            )
            recovered = await must_get(backend, claimed.id)
            assert recovered.worker_id is None
            assert recovered.attempts == 0
