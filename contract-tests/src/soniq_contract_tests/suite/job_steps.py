"""`JobStepStore`: a running job's completed steps and last checkpoint, stored with its row.

A row starts with no steps and no checkpoint. `save_step` sets one key of `steps` and keeps the
others; `save_checkpoint` replaces the checkpoint. Both are fenced like every worker write: only
the worker that owns a `processing` row writes, anyone else gets False and nothing changes. The
claim and `get_job` return both, decoded, and nothing but a dead-letter move clears them: a nack,
a retry, a snooze, stale recovery (release or requeue) and a cancel request keep them, so the
next run of the same job id sees what the last one stored.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from soniq.backend import (
    Backend,
    ClaimJobsParams,
    DeadLetterJobParams,
    JobRecord,
    JobStatus,
    NackJobParams,
    ReplayDeadLetterParams,
    RequestCancelParams,
    RescueAction,
    RescueJobsParams,
    RetryJobParams,
    SaveCheckpointParams,
    SaveStepParams,
    SnoozeJobParams,
)
from soniq_contract_tests.harness import (
    MISSING_JOB_ID,
    ContractHarness,
    complete_one,
    enqueue,
    enqueue_and_claim,
    fields_except,
    must_get,
    new_job,
    utc_now,
)
from soniq_contract_tests.suite._examples import draw, json_values, storable_text
from soniq_contract_tests.suite.recovery import fenced

AWKWARD_STEP_NAMES = ["a.b", 'say "hi"', "[0]", "$", "$.x", "a'b", " ", "ünï ✓", "{}", "-1", "x" * 200]
"""Step names a store must keep as one literal key (not a JSON path, not an index)."""


async def save_step(backend: Backend, row: JobRecord | str, worker_id: str, name: str, value: Any) -> bool:
    job_id = row if isinstance(row, str) else row.id
    written = await backend.save_step(
        SaveStepParams(job_id=job_id, worker_id=worker_id, name=name, value_json=json.dumps(value))
    )
    if not isinstance(written, bool):
        raise AssertionError(f"save_step({name!r}) returned {written!r}, not a bool")
    return written


async def save_checkpoint(backend: Backend, row: JobRecord | str, worker_id: str, value: Any) -> bool:
    job_id = row if isinstance(row, str) else row.id
    written = await backend.save_checkpoint(
        SaveCheckpointParams(job_id=job_id, worker_id=worker_id, value_json=json.dumps(value))
    )
    if not isinstance(written, bool):
        raise AssertionError(f"save_checkpoint returned {written!r}, not a bool")
    return written


async def running_with_progress(backend: Backend, worker_id: str = "w1") -> JobRecord:
    """A claimed, started row with two steps and a checkpoint stored, as read back."""
    row = await enqueue_and_claim(backend, worker_id=worker_id, mark_started=True)
    assert await save_step(backend, row, worker_id, "fetch", {"rows": 3})
    assert await save_step(backend, row, worker_id, "transform", [1, 2, 3])
    assert await save_checkpoint(backend, row, worker_id, {"offset": 42})
    stored = await must_get(backend, row.id)
    assert dict(stored.steps) == {"fetch": {"rows": 3}, "transform": [1, 2, 3]}
    assert stored.checkpoint == {"offset": 42}
    return stored


def assert_progress_kept(row: JobRecord, what: str) -> None:
    assert dict(row.steps) == {"fetch": {"rows": 3}, "transform": [1, 2, 3]}, f"{what} changed the steps: {row.steps}"
    assert row.checkpoint == {"offset": 42}, f"{what} changed the checkpoint: {row.checkpoint!r}"


class JobStepContract:
    async def test_a_new_row_has_no_steps_and_no_checkpoint(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queued = await enqueue(backend)
            assert (dict(queued.steps), queued.checkpoint) == ({}, None)
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=[queued.queue], limit=1, mark_started=True)
            )
            assert [(dict(row.steps), row.checkpoint) for row in claimed] == [({}, None)]

    async def test_save_step_adds_a_key_and_keeps_the_others(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            assert await save_step(backend, row, "w1", "one", 1) is True
            assert await save_step(backend, row, "w1", "two", {"b": [2]}) is True
            assert dict((await must_get(backend, row.id)).steps) == {"one": 1, "two": {"b": [2]}}
            assert await save_step(backend, row, "w1", "one", "replaced") is True
            stored = await must_get(backend, row.id)
            assert dict(stored.steps) == {"one": "replaced", "two": {"b": [2]}}
            assert stored.checkpoint is None
            assert (stored.status, stored.worker_id) == (JobStatus.PROCESSING, "w1")

    async def test_save_step_writes_nothing_else(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="w1", mark_started=True, args={"keep": "me"})
            assert await save_step(backend, row, "w1", "s", True)
            assert await save_checkpoint(backend, row, "w1", 7)
            stored = await must_get(backend, row.id)
            changed = ("steps", "checkpoint", "updated_at")
            assert fields_except(stored, *changed) == fields_except(row, *changed)

    async def test_step_names_are_literal_keys(self, contract: ContractHarness) -> None:
        names = draw(storable_text(min_size=1, max_size=60), AWKWARD_STEP_NAMES)
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            expected: dict[str, Any] = {}
            for n, name in enumerate(names):
                assert await save_step(backend, row, "w1", name, n), f"save_step({name!r})"
                expected[name] = n
                stored = dict((await must_get(backend, row.id)).steps)
                assert stored == expected, f"after saving the step {name!r} the steps are {stored!r}"

    async def test_step_and_checkpoint_values_round_trip(self, contract: ContractHarness) -> None:
        values = draw(json_values(), [None, 0, "", [], {}, {"nested": {"list": [1, "two", None, True]}}, "ünï ✓"])
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            for n, value in enumerate(values):
                assert await save_step(backend, row, "w1", f"step-{n}", value)
                assert await save_checkpoint(backend, row, "w1", value)
                stored = await must_get(backend, row.id)
                assert stored.steps[f"step-{n}"] == value, (
                    f"step value {value!r} came back as {stored.steps[f'step-{n}']!r}"
                )
                assert stored.checkpoint == value, f"checkpoint {value!r} came back as {stored.checkpoint!r}"

    async def test_a_checkpoint_replaces_the_last_one(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            assert await save_checkpoint(backend, row, "w1", {"offset": 1}) is True
            assert await save_checkpoint(backend, row, "w1", {"cursor": "b"}) is True
            stored = await must_get(backend, row.id)
            assert stored.checkpoint == {"cursor": "b"}
            assert dict(stored.steps) == {}

    async def test_another_worker_writes_nothing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_progress(backend, "owner")
            assert await save_step(backend, row, "intruder", "fetch", "stolen") is False
            assert await save_step(backend, row, "intruder", "extra", 1) is False
            assert await save_checkpoint(backend, row, "intruder", "stolen") is False
            assert await must_get(backend, row.id) == row

    async def test_a_row_that_is_not_processing_is_not_written(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queued = await enqueue(backend)
            nacked = await running_with_progress(backend, "w1")
            assert await steps_nack(backend, nacked, "w1")
            done = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            assert await complete_one(backend, job_id=done.id, worker_id="w1", result=None)
            for job_id in (queued.id, nacked.id, done.id):
                before = await must_get(backend, job_id)
                assert await save_step(backend, job_id, "w1", "late", 1) is False
                assert await save_checkpoint(backend, job_id, "w1", "late") is False
                assert await must_get(backend, job_id) == before, f"a write landed on the {before.status.value} row"
            assert await save_step(backend, MISSING_JOB_ID, "w1", "late", 1) is False
            assert await save_checkpoint(backend, MISSING_JOB_ID, "w1", "late") is False

    async def test_the_claim_and_get_job_return_what_the_last_run_stored(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_progress(backend, "old-worker")
            assert await steps_nack(backend, row, "old-worker")
            assert_progress_kept(await must_get(backend, row.id), "a nack")
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="new-worker", queues=[row.queue], limit=1, mark_started=True)
            )
            assert [item.id for item in claimed] == [row.id]
            assert_progress_kept(claimed[0], "the claim")
            assert await save_step(backend, row, "new-worker", "load", "ok") is True
            assert await save_step(backend, row, "old-worker", "load", "stale") is False
            stored = await must_get(backend, row.id)
            assert dict(stored.steps) == {"fetch": {"rows": 3}, "transform": [1, 2, 3], "load": "ok"}

    async def test_nack_keeps_steps_and_checkpoint(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            for handler_started in (False, True):
                row = await running_with_progress(backend)
                assert await backend.nack_job(
                    NackJobParams(job_id=row.id, worker_id="w1", handler_started=handler_started)
                )
                assert_progress_kept(await must_get(backend, row.id), f"a nack (handler_started={handler_started})")

    async def test_retry_keeps_steps_and_checkpoint(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_progress(backend)
            assert await backend.retry_job(
                RetryJobParams(job_id=row.id, worker_id="w1", error="boom", scheduled_at=utc_now())
            )
            retried = await must_get(backend, row.id)
            assert (retried.status, retried.attempts) == (JobStatus.QUEUED, row.attempts + 1)
            assert_progress_kept(retried, "a retry")
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w2", queues=[row.queue], limit=1, mark_started=True)
            )
            assert_progress_kept(claimed[0], "the claim after a retry")

    async def test_snooze_keeps_steps_and_checkpoint(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_progress(backend)
            later = utc_now() + timedelta(minutes=5)
            assert await backend.snooze_job(SnoozeJobParams(job_id=row.id, worker_id="w1", scheduled_at=later))
            assert_progress_kept(await must_get(backend, row.id), "a snooze")

    async def test_stale_recovery_keeps_steps_and_checkpoint(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            for action in (RescueAction.RELEASE, RescueAction.REQUEUE):
                row = await running_with_progress(backend, "lost-worker")
                error = None if action is RescueAction.RELEASE else "worker lost"
                attempts = row.attempts if action is RescueAction.RELEASE else row.attempts + 1
                rescued = await backend.rescue_jobs(
                    RescueJobsParams(rescues=[fenced(row, action, attempts=attempts, error=error)])
                )
                assert rescued == {row.id}, f"the {action.value} rescue returned {rescued!r}"
                after = await must_get(backend, row.id)
                assert after.status is JobStatus.QUEUED
                assert_progress_kept(after, f"a {action.value} rescue")

    async def test_a_cancel_request_keeps_steps_and_checkpoint(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_progress(backend)
            await backend.request_cancel(RequestCancelParams(job_id=row.id))
            after = await must_get(backend, row.id)
            assert after.cancel_requested is True
            assert_progress_kept(after, "a cancel request")
            assert await save_step(backend, row, "w1", "after-cancel-request", 1) is True

    async def test_a_replayed_dead_letter_starts_without_steps(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_progress(backend)
            assert await backend.dead_letter_job(
                DeadLetterJobParams(job_id=row.id, worker_id="w1", error="gave up", reason="max_attempts")
            )
            replayed_id = new_job().id
            await backend.replay_dead_letter(
                ReplayDeadLetterParams(job_id=row.id, new_job_id=replayed_id, scheduled_at=utc_now())
            )
            replayed = await must_get(backend, replayed_id)
            assert (dict(replayed.steps), replayed.checkpoint) == ({}, None)


async def steps_nack(backend: Backend, row: JobRecord, worker_id: str) -> bool:
    return await backend.nack_job(NackJobParams(job_id=row.id, worker_id=worker_id, handler_started=True))
