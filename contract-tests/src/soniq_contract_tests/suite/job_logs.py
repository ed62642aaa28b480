"""`JobLogStore`: the log text of a job, stored with its row and with its dead-letter row.

A row starts with no logs (`get_job_logs` is None, as for an id no store holds). `save_job_logs`
replaces the text, fenced like every worker write: only the worker that owns a `processing` row
writes, anyone else (and a `queued`, finished, dead-lettered or missing row) gets False and nothing
changes. The text comes back exactly as given, whatever characters it holds and up to 64 KiB.
Nothing but deleting the row clears it: a nack, a retry, a snooze, stale recovery and completion
keep it, and every move to the dead-letter table (`dead_letter_job`, a dead-letter rescue,
`expire_unknown_jobs`) carries it along, so `get_job_logs` still reads it there. A replayed job
starts without logs; deleting, pruning or purging a row deletes its logs with it.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from hypothesis import strategies as st

from soniq.backend import (
    Backend,
    CancelJobParams,
    CompleteJobsParams,
    DeadLetterFilter,
    DeadLetterJobParams,
    DeadLetterReason,
    DeleteDeadLettersParams,
    DeleteJobParams,
    EnqueueJobsParams,
    ExpireUnknownJobsParams,
    GetJobLogsParams,
    GetJobParams,
    JobRecord,
    JobResult,
    JobStatus,
    NackJobParams,
    PruneDeadLettersParams,
    PruneJobsParams,
    PurgeDeadLetterParams,
    ReplayDeadLetterParams,
    RescueAction,
    RescueJobsParams,
    RetryJobParams,
    SaveJobLogsParams,
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
    unique_queue,
    utc_now,
)
from soniq_contract_tests.suite._examples import draw, json_values, storable_text
from soniq_contract_tests.suite.job_progress import assert_progress, claim_again, progress, save_progress
from soniq_contract_tests.suite.recovery import fenced

LARGEST_LOG_BYTES = 64 * 1024
"""The largest log text the suite stores (UTF-8 bytes)."""


def log_text(records: list[dict[str, Any]], *, ensure_ascii: bool = False, indent: int | None = None) -> str:
    """Log records as JSON text, the form core hands the backend (`logs_json`)."""
    separators = None if indent is not None else (",", ":")
    return json.dumps(records, ensure_ascii=ensure_ascii, indent=indent, separators=separators)


def record(message: str, level: str = "INFO") -> dict[str, Any]:
    return {"at": "2026-01-02T03:04:05.678901+00:00", "level": level, "message": message}


def sized_log(target_bytes: int, unit: str) -> str:
    """A log of records built of `unit`s, as long as fits in `target_bytes` UTF-8 bytes."""
    records = [record("")]
    while len(log_text(records).encode()) <= target_bytes:
        records[-1] = record(records[-1]["message"] + unit)
        if len(log_text(records).encode()) > target_bytes:
            records[-1] = record(records[-1]["message"][: -len(unit)])
            break
        if len(records[-1]["message"]) > 4000:
            records.append(record(""))
    return log_text(records)


def log_texts() -> st.SearchStrategy[str]:
    """Log texts of any storable characters, compact or indented, non-ASCII raw or escaped."""
    records = st.lists(
        st.fixed_dictionaries(
            {
                "level": st.sampled_from(["DEBUG", "INFO", "WARNING", "ERROR"]),
                "message": storable_text(max_size=300),
            },
            optional={"extra": json_values(), "exc_info": storable_text(max_size=600)},
        ),
        max_size=6,
    )
    return st.builds(
        lambda items, ascii_only, indent: log_text(items, ensure_ascii=ascii_only, indent=indent),
        records,
        st.booleans(),
        st.none() | st.integers(min_value=0, max_value=4),
    )


FIXED_LOGS = [
    "[]",
    log_text([record("ünï ✓ 😀 \u2028\u2029 \u202e rtl e\u0301 \U0010ffff")]),
    log_text([record("ünï ✓ 😀")], ensure_ascii=True),
    log_text([record('say "hi"\n\tthen \\ and \\u00e9 as text'), record("\r\n", "ERROR")], indent=2),
    log_text([record('Traceback (most recent call last):\n  File "x.py", line 1\nValueError: é\n' * 40, "ERROR")]),
    sized_log(LARGEST_LOG_BYTES, "plain ascii text "),
    sized_log(LARGEST_LOG_BYTES, "ünïcödé ✓ 😀 日本語 "),
]
"""Texts known to be awkward: JSON escapes beside the characters they stand for, line and
paragraph separators, characters outside the BMP, exact whitespace, and logs near 64 KiB."""

LOGS = log_text([record("step one"), record("step two", "WARNING")])


def describe(text: str | None) -> str:
    """A text for a failure message: whole when short, else its length and ends."""
    if text is None or len(text) <= 200:
        return repr(text)
    return f"{len(text)} characters ({len(text.encode())} bytes) {text[:60]!r}...{text[-60:]!r}"


async def save_logs(backend: Backend, row: JobRecord | str, worker_id: str, text: str) -> bool:
    job_id = row if isinstance(row, str) else row.id
    written = await backend.save_job_logs(SaveJobLogsParams(job_id=job_id, worker_id=worker_id, logs_json=text))
    if not isinstance(written, bool):
        raise AssertionError(f"save_job_logs returned {written!r}, not a bool")
    return written


async def get_logs(backend: Backend, job_id: str) -> str | None:
    text = await backend.get_job_logs(GetJobLogsParams(job_id=job_id))
    if text is not None and not isinstance(text, str):
        raise AssertionError(f"get_job_logs({job_id!r}) returned a {type(text).__name__}, not text or None")
    return text


async def assert_logs(backend: Backend, job_id: str, expected: str | None, what: str) -> None:
    got = await get_logs(backend, job_id)
    if got != expected:
        raise AssertionError(f"{what}: get_job_logs returned {describe(got)}, expected {describe(expected)}")


async def running_with_logs(backend: Backend, worker_id: str = "w1", **fields: Any) -> JobRecord:
    """A claimed, started row with `LOGS` saved as its logs; the row as claimed (read it again where
    its `updated_at` matters: a store may move it with the write)."""
    row = await enqueue_and_claim(backend, worker_id=worker_id, mark_started=True, **fields)
    assert await save_logs(backend, row, worker_id, LOGS) is True
    await assert_logs(backend, row.id, LOGS, "after save_job_logs")
    return row


async def assert_dead_lettered_with_logs(
    backend: Backend, job_id: str, text: str, move: str, *, last_owner: str = "w1"
) -> None:
    """The row left `soniq_jobs`, its dead-letter row reads `text`, and not even its last owner writes."""
    assert await backend.get_job(GetJobParams(job_id=job_id)) is None, f"{move} left {job_id} in soniq_jobs"
    await assert_logs(backend, job_id, text, f"the dead-letter row after {move}")
    assert await save_logs(backend, job_id, last_owner, "[]") is False, f"save_job_logs wrote after {move}"
    await assert_logs(backend, job_id, text, f"a save_job_logs after {move}")


class JobLogContract:
    async def test_get_job_logs_is_none_without_logs(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            assert await get_logs(backend, MISSING_JOB_ID) is None
            queued = await enqueue(backend)
            assert await get_logs(backend, queued.id) is None
            claimed = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            assert await get_logs(backend, claimed.id) is None
            assert await complete_one(backend, job_id=claimed.id, worker_id="w1", result=None)
            assert await get_logs(backend, claimed.id) is None
            dead = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            assert await backend.dead_letter_job(
                DeadLetterJobParams(job_id=dead.id, worker_id="w1", error="boom", reason="max_attempts")
            )
            assert await get_logs(backend, dead.id) is None, "a dead-letter row moved without logs has logs"

    async def test_save_job_logs_replaces_the_text_and_writes_nothing_else(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="w1", mark_started=True, args={"keep": "me"})
            first = log_text([record("one")])
            second = log_text([record("one"), record("two")])
            assert await save_logs(backend, row, "w1", first) is True
            await assert_logs(backend, row.id, first, "after the first save_job_logs")
            assert await save_logs(backend, row, "w1", second) is True
            await assert_logs(backend, row.id, second, "after the second save_job_logs")
            assert await save_logs(backend, row, "w1", "[]") is True
            await assert_logs(backend, row.id, "[]", "after saving an empty log")
            stored = await must_get(backend, row.id)
            assert fields_except(stored, "updated_at") == fields_except(row, "updated_at")

    async def test_log_texts_round_trip_exactly(self, contract: ContractHarness) -> None:
        texts = draw(log_texts(), FIXED_LOGS)
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            for text in texts:
                assert await save_logs(backend, row, "w1", text) is True, f"save_job_logs({describe(text)})"
                await assert_logs(backend, row.id, text, "the text as stored")

    async def test_another_worker_writes_no_logs(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_logs(backend, "owner")
            before = await must_get(backend, row.id)
            assert await save_logs(backend, row, "intruder", log_text([record("stolen")])) is False
            await assert_logs(backend, row.id, LOGS, "after a non-owner's save_job_logs")
            assert await must_get(backend, row.id) == before, "a non-owner's save_job_logs changed the row"
            fresh = await enqueue_and_claim(backend, worker_id="owner", mark_started=True)
            assert await save_logs(backend, fresh, "intruder", LOGS) is False
            assert await get_logs(backend, fresh.id) is None

    async def test_logs_are_not_written_to_a_row_that_is_not_processing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queued = await enqueue(backend)
            nacked = await running_with_logs(backend, "w1")
            assert await backend.nack_job(NackJobParams(job_id=nacked.id, worker_id="w1", handler_started=True))
            done = await running_with_logs(backend, "w1")
            assert await complete_one(backend, job_id=done.id, worker_id="w1", result=None)
            cancelled = await enqueue(backend)
            assert await backend.cancel_job(CancelJobParams(job_id=cancelled.id))
            late = log_text([record("late")])
            for job_id, logs in ((queued.id, None), (nacked.id, LOGS), (done.id, LOGS), (cancelled.id, None)):
                before = await must_get(backend, job_id)
                status = before.status.value
                assert await save_logs(backend, job_id, "w1", late) is False, f"save_job_logs on the {status} row"
                await assert_logs(backend, job_id, logs, f"a save_job_logs on the {status} row")
                assert await must_get(backend, job_id) == before, f"a write landed on the {status} row"
            assert await save_logs(backend, MISSING_JOB_ID, "w1", late) is False
            assert await get_logs(backend, MISSING_JOB_ID) is None

    async def test_logs_are_kept_through_nack_retry_snooze_and_completion(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_logs(backend, "w1")
            assert await backend.nack_job(NackJobParams(job_id=row.id, worker_id="w1", handler_started=True))
            await assert_logs(backend, row.id, LOGS, "after a nack")
            await claim_again(backend, row, "w2")
            await assert_logs(backend, row.id, LOGS, "after the claim that followed a nack")
            assert await save_logs(backend, row, "w1", "[]") is False, "the worker that nacked still writes logs"
            second = log_text([record("step one"), record("step two", "WARNING"), record("run two")])
            assert await save_logs(backend, row, "w2", second) is True
            assert await backend.retry_job(
                RetryJobParams(job_id=row.id, worker_id="w2", error="boom", scheduled_at=utc_now())
            )
            await assert_logs(backend, row.id, second, "after a retry")
            await claim_again(backend, row, "w3")
            await assert_logs(backend, row.id, second, "after the claim that followed a retry")
            assert await backend.snooze_job(SnoozeJobParams(job_id=row.id, worker_id="w3", scheduled_at=utc_now()))
            await assert_logs(backend, row.id, second, "after a snooze")
            await claim_again(backend, row, "w4")
            assert await complete_one(backend, job_id=row.id, worker_id="w4", result={"ok": 1})
            assert (await must_get(backend, row.id)).status is JobStatus.DONE
            await assert_logs(backend, row.id, second, "after completion")

    async def test_stale_recovery_keeps_the_logs(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            for action in (RescueAction.RELEASE, RescueAction.REQUEUE):
                row = await running_with_logs(backend, "lost-worker")
                row = await must_get(backend, row.id)
                error = None if action is RescueAction.RELEASE else "worker lost"
                attempts = row.attempts if action is RescueAction.RELEASE else row.attempts + 1
                rescued = await backend.rescue_jobs(
                    RescueJobsParams(rescues=[fenced(row, action, attempts=attempts, error=error)])
                )
                assert rescued == {row.id}, f"the {action.value} rescue returned {rescued!r}"
                assert (await must_get(backend, row.id)).status is JobStatus.QUEUED
                await assert_logs(backend, row.id, LOGS, f"after a {action.value} rescue")

    async def test_dead_letter_job_carries_the_logs(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_logs(backend)
            assert await backend.dead_letter_job(
                DeadLetterJobParams(job_id=row.id, worker_id="w1", error="gave up", reason="max_attempts")
            )
            await assert_dead_lettered_with_logs(backend, row.id, LOGS, "dead_letter_job")

    async def test_a_dead_letter_rescue_carries_the_logs(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await must_get(backend, (await running_with_logs(backend, "lost-worker")).id)
            rescue = fenced(
                row,
                RescueAction.DEAD_LETTER,
                attempts=row.attempts + 1,
                error="worker lost",
                reason=DeadLetterReason.WORKER_LOST.value,
            )
            assert await backend.rescue_jobs(RescueJobsParams(rescues=[rescue])) == {row.id}
            await assert_dead_lettered_with_logs(
                backend, row.id, LOGS, "a dead-letter rescue", last_owner="lost-worker"
            )

    async def test_expire_unknown_jobs_carries_the_logs(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_logs(backend, job_name="gone.job")
            assert await backend.nack_job(NackJobParams(job_id=row.id, worker_id="w1"))
            moved = await backend.expire_unknown_jobs(
                ExpireUnknownJobsParams(known_names=["kept.job"], older_than=0.0, error="no worker knows gone.job")
            )
            assert moved == {row.id}
            await assert_dead_lettered_with_logs(backend, row.id, LOGS, "expire_unknown_jobs")

    async def test_a_replay_starts_without_logs_or_progress(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_logs(backend)
            assert await save_progress(backend, row, "w1", progress(2, 4, "half")) is True
            assert await backend.dead_letter_job(
                DeadLetterJobParams(job_id=row.id, worker_id="w1", error="gave up", reason="max_attempts")
            )
            replayed_id = new_job().id
            assert (
                await backend.replay_dead_letter(
                    ReplayDeadLetterParams(job_id=row.id, new_job_id=replayed_id, scheduled_at=utc_now())
                )
                == replayed_id
            )
            await assert_logs(backend, replayed_id, None, "the replayed row")
            assert_progress(await must_get(backend, replayed_id), None, "the replayed row")
            await assert_logs(backend, row.id, LOGS, "the dead-letter row after its replay")

    async def test_logs_and_progress_are_written_apart(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await running_with_logs(backend)
            value = progress(1, 3, "one of three")
            assert await save_progress(backend, row, "w1", value) is True
            await assert_logs(backend, row.id, LOGS, "after save_progress")
            other = log_text([record("another")])
            assert await save_logs(backend, row, "w1", other) is True
            assert_progress(await must_get(backend, row.id), value, "after save_job_logs")

    async def test_deleting_a_row_deletes_its_logs(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            deleted = await running_with_logs(backend)
            assert await backend.delete_job(DeleteJobParams(job_id=deleted.id)) is True
            await assert_logs(backend, deleted.id, None, "after delete_job")
            gone = await running_with_logs(backend)
            written = await backend.complete_jobs(
                CompleteJobsParams(worker_id="w1", results=[JobResult(job_id=gone.id, result=1, delete_row=True)])
            )
            assert written == {gone.id}
            await assert_logs(backend, gone.id, None, "after a completion with delete_row")
            # A row enqueued again under a deleted id starts with none left over.
            for job_id in (deleted.id, gone.id):
                await backend.enqueue_jobs(EnqueueJobsParams(jobs=[new_job(id=job_id, queue=unique_queue())]))
                await assert_logs(backend, job_id, None, "a new row under a deleted row's id")

    async def test_purging_a_dead_letter_deletes_its_logs(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue()
            purged, bulk = [await running_with_logs(backend, queue=queue) for _ in range(2)]
            for row in (purged, bulk):
                assert await backend.dead_letter_job(
                    DeadLetterJobParams(job_id=row.id, worker_id="w1", error="boom", reason="max_attempts")
                )
            assert await backend.purge_dead_letter(PurgeDeadLetterParams(job_id=purged.id)) is True
            await assert_logs(backend, purged.id, None, "after purge_dead_letter")
            await assert_logs(backend, bulk.id, LOGS, "another dead letter after purge_dead_letter")
            deleted = await backend.delete_dead_letters(
                DeleteDeadLettersParams(filter=DeadLetterFilter(queues=[queue]))
            )
            assert deleted == {bulk.id}
            await assert_logs(backend, bulk.id, None, "after delete_dead_letters")

    async def test_pruning_deletes_the_logs(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            now = utc_now()
            done = await running_with_logs(backend)
            result = JobResult(job_id=done.id, result=None, expires_at=now - timedelta(minutes=1))
            assert await backend.complete_jobs(CompleteJobsParams(worker_id="w1", results=[result])) == {done.id}
            assert await backend.prune_jobs(PruneJobsParams(now=now, limit=100)) == 1
            await assert_logs(backend, done.id, None, "after prune_jobs")
            dead = await running_with_logs(backend)
            assert await backend.dead_letter_job(
                DeadLetterJobParams(job_id=dead.id, worker_id="w1", error="boom", reason="max_attempts")
            )
            cutoff = utc_now() + timedelta(minutes=1)
            assert await backend.prune_dead_letters(PruneDeadLettersParams(before=cutoff, limit=100)) == 1
            await assert_logs(backend, dead.id, None, "after prune_dead_letters")
