"""Stale-worker recovery on the real clock: the backend finds and stores, core decides.

Three layers, each checked on its own: `find_stale_jobs` (what it marks and
returns), `rescue_jobs` (writes exactly the `Rescue` it is handed, fenced on
the row as read) and `soniq.rescue.sweep_stale_workers` end to end (the
outcomes a worker's sweep loop produces).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import timedelta

from soniq.backend import (
    Backend,
    ClaimJobsParams,
    FindStaleJobsParams,
    GetDeadLetterParams,
    GetJobParams,
    HeartbeatParams,
    JobRecord,
    JobStatus,
    NackJobParams,
    Rescue,
    RescueAction,
    RescueJobsParams,
    SetWorkerStatusParams,
    StaleJobPolicy,
    StaleScan,
    WorkerStatus,
    lost_worker_error,
)
from soniq_contract_tests.harness import (
    ContractHarness,
    assert_between,
    complete_one,
    enqueue_and_claim,
    enqueue_with_history,
    heartbeating,
    mark_started_one,
    must_get,
    register,
    sweep,
    sweep_until_stale,
    utc_now,
    wait_until,
)

REQUEUE, DEAD_LETTER = StaleJobPolicy.REQUEUE, StaleJobPolicy.DEAD_LETTER


async def scan_until_stale(harness: ContractHarness, backend: Backend, *, stale_worker: str) -> StaleScan:
    """Call `find_stale_jobs` on the real clock until one scan reports `stale_worker`."""
    params = FindStaleJobsParams(heartbeat_timeout=harness.heartbeat_timeout)
    give_up = time.monotonic() + harness.stale_deadline
    while True:
        scan = await backend.find_stale_jobs(params)
        if not scan.skipped and stale_worker in scan.stale_workers:
            return scan
        if time.monotonic() > give_up:
            raise AssertionError(
                f"worker {stale_worker} stopped heartbeating, yet find_stale_jobs(heartbeat_timeout="
                f"{harness.heartbeat_timeout:g}) did not report it within {harness.stale_deadline:g}s (last: {scan})"
            )
        await _pause(harness)


async def scan_until_orphaned(harness: ContractHarness, backend: Backend, *, job_id: str) -> StaleScan:
    """Call `find_stale_jobs` until one scan returns the row `job_id` as orphaned."""
    params = FindStaleJobsParams(heartbeat_timeout=harness.heartbeat_timeout)
    give_up = time.monotonic() + harness.stale_deadline
    while True:
        scan = await backend.find_stale_jobs(params)
        if any(row.id == job_id for row in scan.orphaned):
            return scan
        if time.monotonic() > give_up:
            raise AssertionError(
                f"find_stale_jobs never returned the orphaned row {job_id} within {harness.stale_deadline:g}s"
            )
        await _pause(harness)


async def _pause(harness: ContractHarness) -> None:
    await asyncio.sleep(harness.heartbeat_timeout / 5)


def fenced(
    row: JobRecord, action: RescueAction, *, attempts: int, error: str | None = None, reason: str | None = None
) -> Rescue:
    """A rescue of `row` as read, with an explicit outcome that core would not necessarily choose."""
    return Rescue(
        job_id=row.id,
        expected_worker_id=row.worker_id or "",
        expected_updated_at=row.updated_at,
        action=action,
        attempts=attempts,
        error=error,
        reason=reason,
    )


class FindStaleJobsContract:
    async def test_find_stale_jobs_marks_the_stale_worker_stopped_and_returns_its_rows_as_read(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            live = await register(backend, "live-worker")
            started = await enqueue_and_claim(backend, worker_id=stale, mark_started=True)
            unstarted = await enqueue_and_claim(backend, worker_id=stale, mark_started=False)
            live_row = await enqueue_and_claim(backend, worker_id=live, mark_started=True)
            async with heartbeating(backend, [live]):
                scan = await scan_until_stale(contract, backend, stale_worker=stale)
            assert scan.stale_workers == (stale,)
            assert scan.skipped is False
            assert sorted(row.id for row in scan.orphaned) == sorted([started.id, unstarted.id])
            for row in scan.orphaned:
                # Returned as read, and nothing was written to the job rows.
                assert row == await must_get(backend, row.id)
                assert (row.status, row.worker_id) == (JobStatus.PROCESSING, stale)
            assert await must_get(backend, live_row.id) == live_row
            statuses = {worker.id: worker.status for worker in await backend.list_workers()}
            assert statuses == {stale: WorkerStatus.STOPPED, live: WorkerStatus.ACTIVE}
            assert await backend.heartbeat(HeartbeatParams(worker_id=stale)) is False

    async def test_find_stale_jobs_reports_a_worker_stale_once(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            await scan_until_stale(contract, backend, stale_worker=stale)
            again = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=contract.heartbeat_timeout))
            assert stale not in again.stale_workers

    async def test_find_stale_jobs_returns_old_rows_of_a_worker_id_with_no_row_or_a_stopped_row(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            ghost = await enqueue_and_claim(backend, worker_id="never-registered", mark_started=True)
            gone = await register(backend, "stopped-worker")
            left = await enqueue_and_claim(backend, worker_id=gone, mark_started=False)
            status = SetWorkerStatusParams(worker_id=gone, status=WorkerStatus.STOPPED)
            assert await backend.set_worker_status(status) is True
            for row in (ghost, left):
                scan = await scan_until_orphaned(contract, backend, job_id=row.id)
                (found,) = [candidate for candidate in scan.orphaned if candidate.id == row.id]
                assert found == await must_get(backend, row.id)

    async def test_find_stale_jobs_never_returns_a_live_workers_rows(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            live = await register(backend, "live-worker")
            started = await enqueue_and_claim(backend, worker_id=live, mark_started=True)
            unstarted = await enqueue_and_claim(backend, worker_id=live, mark_started=False)
            # Registered after the live worker's claims: once it is stale, those rows are older
            # than the timeout too, and only the live worker's heartbeat protects them.
            witness = await register(backend, "witness-worker")
            async with heartbeating(backend, [live]):
                scan = await scan_until_stale(contract, backend, stale_worker=witness)
                later = await backend.find_stale_jobs(FindStaleJobsParams(heartbeat_timeout=contract.heartbeat_timeout))
            for result in (scan, later):
                assert live not in result.stale_workers
                assert not {started.id, unstarted.id} & {row.id for row in result.orphaned}
            assert await must_get(backend, started.id) == started
            assert await must_get(backend, unstarted.id) == unstarted


class RescueJobsContract:
    async def test_rescue_jobs_writes_exactly_the_given_rescue(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            released = await enqueue_with_history(backend, error="kept by a release")
            await backend.claim_jobs(
                ClaimJobsParams(worker_id=stale, queues=[released.queue], limit=1, mark_started=False)
            )
            requeued = await enqueue_and_claim(backend, worker_id=stale, mark_started=True)
            buried = await enqueue_and_claim(backend, worker_id=stale, mark_started=False)
            scan = await scan_until_stale(contract, backend, stale_worker=stale)
            rows = {row.id: row for row in scan.orphaned}
            # Outcomes core would not choose (odd attempts, a dead-lettered unstarted row): the
            # backend must store what it is given, not decide again.
            rescues = [
                fenced(rows[released.id], RescueAction.RELEASE, attempts=1),
                fenced(rows[requeued.id], RescueAction.REQUEUE, attempts=7, error="given: requeue text"),
                fenced(rows[buried.id], RescueAction.DEAD_LETTER, attempts=4, error="given: dl text", reason="zombie"),
            ]
            before = utc_now()
            written = await backend.rescue_jobs(RescueJobsParams(rescues=rescues))
            after = utc_now()
            assert written == {released.id, requeued.id, buried.id}
            slack = contract.slack(backend)

            back = await must_get(backend, released.id)
            assert (back.status, back.worker_id, back.started_at) == (JobStatus.QUEUED, None, None)
            assert (back.attempts, back.last_error) == (1, "kept by a release")
            assert_between(back.scheduled_at, before, after, slack, "scheduled_at of a released row")

            again = await must_get(backend, requeued.id)
            assert (again.status, again.worker_id, again.started_at) == (JobStatus.QUEUED, None, None)
            assert (again.attempts, again.last_error) == (7, "given: requeue text")
            assert_between(again.scheduled_at, before, after, slack, "scheduled_at of a requeued row")

            assert await backend.get_job(GetJobParams(job_id=buried.id)) is None
            dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=buried.id))
            assert dead is not None
            assert (dead.attempts, dead.last_error, dead.dead_letter_reason) == (4, "given: dl text", "zombie")

    async def test_rescue_jobs_leaves_alone_a_row_that_changed_since_it_was_read(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            finished = await enqueue_and_claim(backend, worker_id=stale, mark_started=True)
            reclaimed = await enqueue_and_claim(backend, worker_id=stale, mark_started=False)
            misread = await enqueue_and_claim(backend, worker_id=stale, mark_started=False)
            untouched = await enqueue_and_claim(backend, worker_id=stale, mark_started=False)
            scan = await scan_until_stale(contract, backend, stale_worker=stale)
            rows = {row.id: row for row in scan.orphaned}
            assert set(rows) == {finished.id, reclaimed.id, misread.id, untouched.id}
            # Between the read and the write: the old owner finishes one row, hands another
            # back and a new worker claims it.
            assert await complete_one(backend, job_id=finished.id, worker_id=stale, result="won the race")
            assert await backend.nack_job(NackJobParams(job_id=reclaimed.id, worker_id=stale)) is True
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="new-owner", queues=[reclaimed.queue], limit=1, mark_started=True)
            )
            assert [row.id for row in claimed] == [reclaimed.id]
            new_owner_row = await must_get(backend, reclaimed.id)
            rescues = [
                fenced(rows[finished.id], RescueAction.REQUEUE, attempts=1, error="lost"),
                fenced(rows[reclaimed.id], RescueAction.DEAD_LETTER, attempts=1, error="lost", reason="zombie"),
                # Read at another time than the row holds now: the updated_at fence must refuse it.
                replace(
                    fenced(rows[misread.id], RescueAction.REQUEUE, attempts=1, error="lost"),
                    expected_updated_at=rows[misread.id].updated_at - timedelta(seconds=5),
                ),
                replace(
                    fenced(rows[untouched.id], RescueAction.RELEASE, attempts=0),
                    expected_worker_id="someone-else",
                ),
            ]
            assert await backend.rescue_jobs(RescueJobsParams(rescues=rescues)) == set()
            done = await must_get(backend, finished.id)
            assert (done.status, done.result, done.attempts) == (JobStatus.DONE, "won the race", 0)
            assert await must_get(backend, reclaimed.id) == new_owner_row
            assert await backend.get_dead_letter(GetDeadLetterParams(job_id=reclaimed.id)) is None
            assert await must_get(backend, misread.id) == rows[misread.id]
            assert await must_get(backend, untouched.id) == rows[untouched.id]

    async def test_rescue_jobs_is_fenced_against_a_second_sweeper(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            row = await enqueue_and_claim(backend, worker_id=stale, mark_started=True)
            scan = await scan_until_stale(contract, backend, stale_worker=stale)
            (read,) = scan.orphaned
            rescue = fenced(read, RescueAction.REQUEUE, attempts=1, error="first sweeper")
            assert await backend.rescue_jobs(RescueJobsParams(rescues=[rescue])) == {row.id}
            second = replace(rescue, action=RescueAction.DEAD_LETTER, error="second sweeper", reason="zombie")
            assert await backend.rescue_jobs(RescueJobsParams(rescues=[second])) == set()
            kept = await must_get(backend, row.id)
            assert (kept.status, kept.attempts, kept.last_error) == (JobStatus.QUEUED, 1, "first sweeper")
            assert await backend.get_dead_letter(GetDeadLetterParams(job_id=row.id)) is None


class StaleRecoveryContract(FindStaleJobsContract, RescueJobsContract):
    """End to end through core's `sweep_stale_workers`, as a worker's sweep loop runs it."""

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
            assert await backend.heartbeat(HeartbeatParams(worker_id=stale)) is False
            again = await sweep(backend, heartbeat_timeout=contract.heartbeat_timeout, policy=REQUEUE)
            assert stale not in again.stale_workers

    async def test_stale_recovery_settles_rows_left_by_a_worker_that_marked_itself_stopped(
        self, contract: ContractHarness
    ) -> None:
        # A worker that could not write an outcome and still marked itself stopped must not strand the row.
        async with contract.backend() as backend:
            gone = await register(backend, "stopped-worker")
            row = await enqueue_and_claim(backend, worker_id=gone, mark_started=True)
            status = SetWorkerStatusParams(worker_id=gone, status=WorkerStatus.STOPPED)
            assert await backend.set_worker_status(status) is True

            async def recovered() -> bool:
                result = await sweep(backend, heartbeat_timeout=contract.heartbeat_timeout, policy=REQUEUE)
                return row.id in result.requeued

            await wait_until(recovered, deadline=contract.stale_deadline, message="the stopped worker's row recovered")
            settled = await must_get(backend, row.id)
            assert (settled.status, settled.worker_id, settled.attempts) == (JobStatus.QUEUED, None, row.attempts + 1)
            assert settled.last_error == lost_worker_error(gone, contract.heartbeat_timeout)

    async def test_stale_recovery_never_touches_live_workers_rows(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            live = await register(backend, "live-worker")
            started = await enqueue_and_claim(backend, worker_id=live, mark_started=True)
            unstarted = await enqueue_and_claim(backend, worker_id=live, mark_started=False)
            witness = await register(backend, "witness-worker")
            async with heartbeating(backend, [live]):
                first, earlier = await sweep_until_stale(contract, backend, stale_worker=witness)
                later = [
                    await sweep(backend, heartbeat_timeout=contract.heartbeat_timeout, policy=policy)
                    for policy in (DEAD_LETTER, REQUEUE, DEAD_LETTER)
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
            assert await mark_started_one(backend, job_id=claimed.id, worker_id=stale) is True
            before = utc_now()
            result, _ = await sweep_until_stale(contract, backend, stale_worker=stale)
            after = utc_now()
            assert result.requeued == (claimed.id,)
            recovered = await must_get(backend, claimed.id)
            assert recovered.status is JobStatus.QUEUED
            assert recovered.attempts == 1
            assert recovered.worker_id is None
            assert recovered.last_error == lost_worker_error(stale, contract.heartbeat_timeout)
            assert_between(recovered.scheduled_at, before, after, contract.slack(backend), "scheduled_at")

    async def test_stale_recovery_does_not_count_an_attempt_for_an_unstarted_row(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            failed_once = await enqueue_with_history(backend, error="first run failed")
            await backend.claim_jobs(
                ClaimJobsParams(worker_id=stale, queues=[failed_once.queue], limit=1, mark_started=False)
            )
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
            result, _ = await sweep_until_stale(contract, backend, stale_worker=stale, policy=DEAD_LETTER)
            assert result.dead_lettered == (claimed.id,)
            assert result.requeued == ()
            assert await backend.get_job(GetJobParams(job_id=claimed.id)) is None
            dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=claimed.id))
            assert dead is not None
            assert dead.dead_letter_reason == "zombie"
            assert dead.attempts == 1
            assert dead.last_error == lost_worker_error(stale, contract.heartbeat_timeout)

    async def test_stale_recovery_never_dead_letters_an_unstarted_row(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            claimed = await enqueue_and_claim(backend, worker_id=stale, mark_started=False, max_attempts=1)
            result, _ = await sweep_until_stale(contract, backend, stale_worker=stale, policy=DEAD_LETTER)
            assert result.requeued == (claimed.id,)
            assert result.dead_lettered == ()
            assert await backend.get_dead_letter(GetDeadLetterParams(job_id=claimed.id)) is None
            recovered = await must_get(backend, claimed.id)
            assert recovered.status is JobStatus.QUEUED
            assert recovered.attempts == 0

    async def test_stale_recovery_dead_letters_at_max_attempts_as_worker_lost(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            stale = await register(backend, "stale-worker")
            claimed = await enqueue_and_claim(backend, worker_id=stale, mark_started=True, max_attempts=1)
            result, _ = await sweep_until_stale(contract, backend, stale_worker=stale)
            assert result.dead_lettered == (claimed.id,)
            assert await backend.get_job(GetJobParams(job_id=claimed.id)) is None
            dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=claimed.id))
            assert dead is not None
            assert dead.dead_letter_reason == "worker_lost"
            assert dead.attempts == 1
            assert dead.last_error == lost_worker_error(stale, contract.heartbeat_timeout)

    async def test_stale_recovery_requeues_rows_of_an_unregistered_worker(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="never-registered", mark_started=False)

            async def requeued() -> bool:
                await sweep(backend, heartbeat_timeout=contract.heartbeat_timeout, policy=REQUEUE)
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
