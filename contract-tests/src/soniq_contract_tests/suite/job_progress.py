"""`JobProgressStore`: how far a running job has got, one JSON object stored with its row.

A row starts with no progress. `save_progress` stores the object's text as given and every read
that builds a `JobRecord` (`get_job`, the claim, `job_page`) returns it decoded. The write is
fenced like every worker write: only the worker that owns a `processing` row writes, anyone else
(and a `queued`, finished or missing row) gets False and nothing changes. Nothing else clears it:
a nack, a retry, a snooze, stale recovery (release or requeue) and completion keep the last value.
The dead-letter table does not carry it, so a replayed job starts without one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from soniq.backend import (
    Backend,
    CancelJobParams,
    ClaimJobsParams,
    DeadLetterJobParams,
    JobPageParams,
    JobRecord,
    JobStatus,
    NackJobParams,
    ReplayDeadLetterParams,
    RescueAction,
    RescueJobsParams,
    RetryJobParams,
    SaveProgressParams,
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

LARGEST = 10**15
"""`done` and `total` stay below this (core's bound), so every store keeps them exactly."""


def progress(done: float, total: float | None = None, message: str | None = None) -> dict[str, Any]:
    """A progress object of the shape core builds (`soniq.progress.progress_value`)."""
    return {"done": done, "total": total, "message": message, "updated_at": utc_now().isoformat()}


def progress_text(value: Mapping[str, Any]) -> str:
    """The text core hands the backend: compact, non-ASCII characters as they are."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def progress_objects() -> st.SearchStrategy[dict[str, Any]]:
    """Objects of core's shape with any storable message, and any other JSON objects."""
    numbers = st.one_of(
        st.integers(min_value=0, max_value=LARGEST - 1),
        st.floats(min_value=0, max_value=LARGEST - 1, allow_nan=False, allow_infinity=False),
    )
    stamps = st.datetimes(timezones=st.just(UTC)).map(datetime.isoformat)
    shaped = st.fixed_dictionaries(
        {
            "done": numbers,
            "total": st.none() | numbers,
            "message": st.none() | storable_text(max_size=1000),
            "updated_at": stamps,
        }
    )
    return st.one_of(shaped, st.dictionaries(storable_text(max_size=12), json_values(), max_size=5))


FIXED_PROGRESS: list[dict[str, Any]] = [
    progress(0),
    progress(3, 10, "ünï ✓ 😀"),
    progress(0.5, 1.0, 'line one\nline "two"\t\\ done'),
    progress(LARGEST - 1, LARGEST - 1, "x" * 1000),
    progress(7, None, "\u2028\u2029 \u202e rtl \u0301 \U0010ffff"),
    progress(1, 2, "\\u00e9 is not é"),
    {},
    {"done": 1, "extra": {"nested": [1, "two", None, True]}},
]
"""Values known to be awkward: the largest numbers, a 1,000-character message, escapes, JSON
escape sequences as literal text, characters outside the BMP, an object of another shape."""


async def save_progress(backend: Backend, row: JobRecord | str, worker_id: str, value: Mapping[str, Any]) -> bool:
    job_id = row if isinstance(row, str) else row.id
    written = await backend.save_progress(
        SaveProgressParams(job_id=job_id, worker_id=worker_id, progress_json=progress_text(value))
    )
    if not isinstance(written, bool):
        raise AssertionError(f"save_progress returned {written!r}, not a bool")
    return written


def assert_progress(row: JobRecord, expected: Mapping[str, Any] | None, what: str) -> None:
    """`row.progress` is `expected` decoded from the text it was stored as (a dict, or None)."""
    want = None if expected is None else json.loads(progress_text(expected))
    got = row.progress
    if got is not None and not isinstance(got, Mapping):
        raise AssertionError(f"{what}: progress is a {type(got).__name__} ({got!r}), not the decoded object")
    if (None if got is None else dict(got)) != want:
        raise AssertionError(f"{what}: progress is {got!r}, expected {want!r}")


STORED = progress(3, 10, "three of ten")


async def running_with_progress(backend: Backend, worker_id: str = "w1", **fields: Any) -> JobRecord:
    """A claimed, started row with `STORED` saved, as read back."""
    row = await enqueue_and_claim(backend, worker_id=worker_id, mark_started=True, **fields)
    assert await save_progress(backend, row, worker_id, STORED) is True
    stored = await must_get(backend, row.id)
    assert_progress(stored, STORED, "get_job after save_progress")
    return stored


async def claim_again(backend: Backend, row: JobRecord, worker_id: str) -> JobRecord:
    """Claim `row`, the only due row of its queue, for `worker_id`: the claimed row as returned."""
    claimed = await backend.claim_jobs(
        ClaimJobsParams(worker_id=worker_id, queues=[row.queue], limit=1, mark_started=True)
    )
    if [item.id for item in claimed] != [row.id]:
        raise AssertionError(f"claiming the only due row {row.id} again returned {claimed!r}")
    return claimed[0]


class JobProgressContract:
    async def test_a_new_row_has_no_progress(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queued = await enqueue(backend)
            assert_progress(queued, None, "get_job of a new row")
            claimed = await claim_again(backend, queued, "w1")
            assert_progress(claimed, None, "the claim of a new row")

    async def test_save_progress_stores_the_object_and_writes_nothing_else(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="w1", mark_started=True, args={"keep": "me"})
            assert await save_progress(backend, row, "w1", STORED) is True
            stored = await must_get(backend, row.id)
            assert_progress(stored, STORED, "get_job after save_progress")
            changed = ("progress", "updated_at")
            assert fields_except(stored, *changed) == fields_except(row, *changed)

    async def test_a_progress_write_replaces_the_last_one(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            first = progress(1, 10, "first")
            second = {"done": 2, "note": "another shape"}
            assert await save_progress(backend, row, "w1", first) is True
            assert await save_progress(backend, row, "w1", second) is True
            assert_progress(await must_get(backend, row.id), second, "get_job after a second save_progress")

    async def test_progress_values_round_trip(self, contract: ContractHarness) -> None:
        values = draw(progress_objects(), FIXED_PROGRESS)
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            for value in values:
                assert await save_progress(backend, row, "w1", value) is True, f"save_progress({value!r})"
                assert_progress(await must_get(backend, row.id), value, "get_job")

    async def test_another_worker_writes_no_progress(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_progress(backend, "owner")
            assert await save_progress(backend, row, "intruder", progress(9, 10, "stolen")) is False
            assert await must_get(backend, row.id) == row, "a non-owner's save_progress changed the row"
            fresh = await enqueue_and_claim(backend, worker_id="owner", mark_started=True)
            assert await save_progress(backend, fresh, "intruder", progress(1)) is False
            assert await must_get(backend, fresh.id) == fresh

    async def test_progress_is_not_written_to_a_row_that_is_not_processing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queued = await enqueue(backend)
            nacked = await running_with_progress(backend, "w1")
            assert await backend.nack_job(NackJobParams(job_id=nacked.id, worker_id="w1", handler_started=True))
            done = await running_with_progress(backend, "w1")
            assert await complete_one(backend, job_id=done.id, worker_id="w1", result=None)
            cancelled = await enqueue(backend)
            assert await backend.cancel_job(CancelJobParams(job_id=cancelled.id))
            for job_id in (queued.id, nacked.id, done.id, cancelled.id):
                before = await must_get(backend, job_id)
                assert await save_progress(backend, job_id, "w1", progress(99, 100, "late")) is False, (
                    f"save_progress on the {before.status.value} row returned True"
                )
                assert await must_get(backend, job_id) == before, f"a write landed on the {before.status.value} row"
            assert await save_progress(backend, MISSING_JOB_ID, "w1", progress(1)) is False

    async def test_the_claim_after_a_nack_returns_the_progress_and_the_fence_follows_the_owner(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            row = await running_with_progress(backend, "old-worker")
            assert await backend.nack_job(NackJobParams(job_id=row.id, worker_id="old-worker", handler_started=True))
            assert_progress(await must_get(backend, row.id), STORED, "get_job after a nack")
            claimed = await claim_again(backend, row, "new-worker")
            assert_progress(claimed, STORED, "the claim after a nack")
            later = progress(5, 10, "five")
            assert await save_progress(backend, row, "old-worker", progress(4, 10, "stale")) is False
            assert await save_progress(backend, row, "new-worker", later) is True
            assert_progress(await must_get(backend, row.id), later, "get_job after the new owner's write")

    async def test_the_claim_after_a_retry_returns_the_progress(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_progress(backend)
            assert await backend.retry_job(
                RetryJobParams(job_id=row.id, worker_id="w1", error="boom", scheduled_at=utc_now())
            )
            retried = await must_get(backend, row.id)
            assert (retried.status, retried.attempts) == (JobStatus.QUEUED, row.attempts + 1)
            assert_progress(retried, STORED, "get_job after a retry")
            assert_progress(await claim_again(backend, row, "w2"), STORED, "the claim after a retry")

    async def test_completion_keeps_the_progress(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_progress(backend)
            assert await complete_one(backend, job_id=row.id, worker_id="w1", result={"ok": True})
            done = await must_get(backend, row.id)
            assert done.status is JobStatus.DONE
            assert_progress(done, STORED, "get_job after completion")

    async def test_snooze_keeps_the_progress(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_progress(backend)
            later = utc_now() + timedelta(minutes=5)
            assert await backend.snooze_job(SnoozeJobParams(job_id=row.id, worker_id="w1", scheduled_at=later))
            assert_progress(await must_get(backend, row.id), STORED, "get_job after a snooze")

    async def test_stale_recovery_keeps_the_progress(self, contract: ContractHarness) -> None:
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
                assert_progress(after, STORED, f"get_job after a {action.value} rescue")
                assert_progress(await claim_again(backend, row, "w2"), STORED, f"the claim after a {action.value}")

    async def test_job_page_returns_the_progress(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_progress(backend, queue="progress-page")
            other = await enqueue(backend, queue="progress-page")
            page = await backend.job_page(JobPageParams(queues=["progress-page"], limit=10))
            by_id = {item.id: item for item in page.rows}
            assert set(by_id) == {row.id, other.id}
            assert_progress(by_id[row.id], STORED, "job_page")
            assert_progress(by_id[other.id], None, "job_page of a row without progress")

    async def test_a_replayed_dead_letter_starts_without_progress(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_progress(backend)
            assert await backend.dead_letter_job(
                DeadLetterJobParams(job_id=row.id, worker_id="w1", error="gave up", reason="max_attempts")
            )
            assert await save_progress(backend, row, "w1", progress(1)) is False
            replayed_id = new_job().id
            assert (
                await backend.replay_dead_letter(
                    ReplayDeadLetterParams(job_id=row.id, new_job_id=replayed_id, scheduled_at=utc_now())
                )
                == replayed_id
            )
            replayed = await must_get(backend, replayed_id)
            assert_progress(replayed, None, "the replayed row")
            assert_progress(await claim_again(backend, replayed, "w2"), None, "the claim of the replayed row")
