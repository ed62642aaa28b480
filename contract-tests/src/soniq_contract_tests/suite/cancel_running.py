"""Cancelling a job whatever its status: `request_cancel`, `cancel_requests`, `finish_cancel`.

A queued row is cancelled at once; a running row only gets `cancel_requested`,
which its owner reads through `cancel_requests` and ends with the fenced
`finish_cancel`. A finished or dead-lettered job is left alone, and an unknown
id is reported as such. The flag stays on the row through a nack or a retry.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from soniq.backend import (
    Backend,
    CancelOutcome,
    CancelRequestsParams,
    ClaimJobsParams,
    DeadLetterJobParams,
    EnqueueJobsParams,
    FinishCancelParams,
    GetDeadLetterParams,
    JobRecord,
    JobStatus,
    NackJobParams,
    RequestCancelParams,
    RetryJobParams,
)
from soniq_contract_tests.harness import (
    MISSING_JOB_ID,
    ContractHarness,
    assert_between,
    complete_one,
    enqueue,
    enqueue_and_claim,
    fields_except,
    must_get,
    new_job,
    unique_queue,
    utc_now,
)

MESSAGE = "cancelled by ops@example.com; the handler stopped at its next await"


async def request(backend: Backend, job_id: str) -> CancelOutcome:
    outcome = await backend.request_cancel(RequestCancelParams(job_id=job_id))
    assert isinstance(outcome, CancelOutcome), f"request_cancel returned {outcome!r}, not a CancelOutcome"
    return outcome


async def requests_of(backend: Backend, worker_id: str) -> set[str]:
    return set(await backend.cancel_requests(CancelRequestsParams(worker_id=worker_id)))


async def finish(backend: Backend, job_id: str, worker_id: str, message: str = MESSAGE) -> bool:
    return await backend.finish_cancel(FinishCancelParams(job_id=job_id, worker_id=worker_id, message=message))


async def requested_row(backend: Backend, worker_id: str = "runner", **fields: object) -> JobRecord:
    """A claimed row whose cancel was requested."""
    row = await enqueue_and_claim(backend, worker_id=worker_id, mark_started=True, **fields)
    assert await request(backend, row.id) is CancelOutcome.REQUESTED
    return await must_get(backend, row.id)


class CancelRunningContract:
    async def test_request_cancel_of_a_queued_row_cancels_it(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue(backend)
            before = utc_now()
            assert await request(backend, row.id) is CancelOutcome.CANCELLED
            after = await must_get(backend, row.id)
            assert (after.status, after.worker_id, after.attempts) == (JobStatus.CANCELLED, None, 0)
            assert_between(after.updated_at, before, utc_now(), contract.slack(backend), "updated_at of the cancel")
            assert await request(backend, row.id) is CancelOutcome.ALREADY_FINISHED

    async def test_request_cancel_of_a_processing_row_only_sets_the_flag(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="runner", mark_started=True)
            assert row.cancel_requested is False
            assert await request(backend, row.id) is CancelOutcome.REQUESTED
            flagged = await must_get(backend, row.id)
            assert (flagged.status, flagged.worker_id, flagged.cancel_requested) == (
                JobStatus.PROCESSING,
                "runner",
                True,
            )
            assert fields_except(flagged, "cancel_requested") == fields_except(row, "cancel_requested"), (
                "request_cancel of a running row must change nothing but cancel_requested"
            )
            assert await request(backend, row.id) is CancelOutcome.REQUESTED, "a second request is the same request"
            assert await must_get(backend, row.id) == flagged

    async def test_request_cancel_of_a_finished_or_unknown_job_writes_nothing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            done = await enqueue_and_claim(backend, worker_id="runner")
            assert await complete_one(backend, job_id=done.id, worker_id="runner", result={"ok": 1})
            done = await must_get(backend, done.id)
            dead = await enqueue_and_claim(backend, worker_id="runner")
            assert await backend.dead_letter_job(
                DeadLetterJobParams(job_id=dead.id, worker_id="runner", error="boom", reason="max_retries_exceeded")
            )
            dead_row = await backend.get_dead_letter(GetDeadLetterParams(job_id=dead.id))
            assert await request(backend, done.id) is CancelOutcome.ALREADY_FINISHED
            assert await request(backend, dead.id) is CancelOutcome.ALREADY_FINISHED
            assert await request(backend, MISSING_JOB_ID) is CancelOutcome.NOT_FOUND
            assert await must_get(backend, done.id) == done
            assert await backend.get_dead_letter(GetDeadLetterParams(job_id=dead.id)) == dead_row

    async def test_cancel_requests_returns_only_that_workers_requested_running_rows(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            mine = [await enqueue_and_claim(backend, worker_id="w-a") for _ in range(3)]
            theirs = await enqueue_and_claim(backend, worker_id="w-b")
            for row in (mine[0], mine[1], theirs):
                assert await request(backend, row.id) is CancelOutcome.REQUESTED
            assert await requests_of(backend, "w-a") == {mine[0].id, mine[1].id}
            assert await requests_of(backend, "w-b") == {theirs.id}
            assert await requests_of(backend, "w-nobody") == set()
            assert await finish(backend, mine[0].id, "w-a")
            assert await complete_one(backend, job_id=mine[1].id, worker_id="w-a", result=None)
            assert await requests_of(backend, "w-a") == set(), "finished rows are no longer running requests"

    async def test_finish_cancel_writes_cancelled_and_keeps_attempts(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await requested_row(backend)
            before = utc_now()
            assert await finish(backend, row.id, "runner")
            after = utc_now()
            ended = await must_get(backend, row.id)
            assert (ended.status, ended.worker_id, ended.last_error) == (JobStatus.CANCELLED, None, MESSAGE)
            assert (ended.attempts, ended.cancel_requested) == (row.attempts, True)
            assert_between(ended.updated_at, before, after, contract.slack(backend), "updated_at of finish_cancel")
            assert await finish(backend, row.id, "runner") is False, "the row is no longer processing"

    async def test_finish_cancel_is_fenced(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await requested_row(backend)
            assert await finish(backend, row.id, "intruder") is False
            assert await must_get(backend, row.id) == row
            assert await finish(backend, MISSING_JOB_ID, "runner") is False

    async def test_a_completion_after_the_request_still_writes_done(self, contract: ContractHarness) -> None:
        """The handler finished before it saw the request: the cancel lost the race."""
        async with contract.backend() as backend:
            row = await requested_row(backend)
            assert await complete_one(backend, job_id=row.id, worker_id="runner", result={"made": "it"})
            ended = await must_get(backend, row.id)
            assert (ended.status, ended.worker_id) == (JobStatus.DONE, None)
            assert await finish(backend, row.id, "runner") is False
            assert (await must_get(backend, row.id)).status is JobStatus.DONE

    async def test_the_flag_survives_a_nack_and_a_retry_and_comes_back_with_the_claim(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("cancel")
            row = await requested_row(backend, queue=queue)
            assert await backend.nack_job(NackJobParams(job_id=row.id, worker_id="runner"))
            nacked = await must_get(backend, row.id)
            assert (nacked.status, nacked.cancel_requested) == (JobStatus.QUEUED, True)
            claim = ClaimJobsParams(worker_id="next", queues=[queue], limit=1, mark_started=True)
            (again,) = await backend.claim_jobs(claim)
            assert (again.id, again.cancel_requested) == (row.id, True), "the claim must show the earlier request"
            assert await requests_of(backend, "next") == {row.id}
            due = utc_now() - timedelta(seconds=1)
            assert await backend.retry_job(RetryJobParams(job_id=row.id, worker_id="next", error="x", scheduled_at=due))
            (third,) = await backend.claim_jobs(replace(claim, worker_id="third"))
            assert third.cancel_requested is True

    async def test_a_fresh_claim_has_no_cancel_request(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="runner")
            assert row.cancel_requested is False
            assert await requests_of(backend, "runner") == set()

    async def test_cancelling_fails_dependents(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("cancel")
            running, waiting = new_job(queue=queue), new_job(queue=queue)
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[running, waiting]))
            dependents = [new_job(queue=queue, depends_on=(dep.id,)) for dep in (running, waiting)]
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=dependents))
            claim = ClaimJobsParams(worker_id="runner", queues=[queue], limit=1, mark_started=True)
            (claimed,) = await backend.claim_jobs(claim)
            queued = waiting if claimed.id == running.id else running
            assert await request(backend, claimed.id) is CancelOutcome.REQUESTED
            assert await request(backend, queued.id) is CancelOutcome.CANCELLED
            assert await finish(backend, claimed.id, "runner")
            for dep, dependent in zip((running, waiting), dependents, strict=True):
                row = await must_get(backend, dependent.id)
                assert (row.status, row.waiting_on, row.last_error) == (
                    JobStatus.CANCELLED,
                    0,
                    f"dependency {dep.id} was cancelled",
                ), f"dependent of {dep.id}: {row.status.value}, {row.waiting_on}, {row.last_error!r}"
