"""Producers: enqueue (all or none), get, list, and awkward text that must round-trip untouched."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from soniq import Soniq
from soniq.backend import (
    ClaimJobsParams,
    DeadLetterJobParams,
    EnqueueJobsParams,
    GetDeadLetterParams,
    GetJobParams,
    JobPageParams,
    JobStatus,
    QueueStatsParams,
    RetryJobParams,
)
from soniq_contract_tests.harness import (
    ContractHarness,
    assert_between,
    assert_same_time,
    assert_utc,
    complete_one,
    enqueue,
    enqueue_and_claim,
    must_get,
    new_job,
    utc_now,
)

AWKWARD_TEXT = [
    "it's",
    'say "hi"',
    "semi;colon",
    "'; DROP TABLE soniq_jobs; --",
    "SELECT * FROM soniq_jobs WHERE status = 'queued' OR 1=1",
    "back\\slash \\x00 \\n",
    "percent %s %(name)s %%",
    "$1 $$ ? :name {0} {}",
    "line\nbreak\ttab\r",
    "ünïcödé Ж 中文 العربية",
    "emoji 🎉🚀 👩‍💻",
    " padded ",
]


class EnqueueContract:
    async def test_enqueue_stores_every_field_as_given(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            when = utc_now() + timedelta(minutes=3)
            job = new_job(
                job_name="billing.charge",
                args={"amount": 12.5, "tags": ["a", "b"], "nested": {"ok": True, "none": None}, "n": 3},
                queue="billing",
                priority=7,
                scheduled_at=when,
                max_attempts=6,
                trace_context={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
            )
            before = utc_now()
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
            after = utc_now()
            row = await must_get(backend, job.id)
            assert (row.id, row.job_name, row.queue, row.priority, row.max_attempts) == (
                job.id,
                "billing.charge",
                "billing",
                7,
                6,
            )
            assert dict(row.args) == {"amount": 12.5, "tags": ["a", "b"], "nested": {"ok": True, "none": None}, "n": 3}
            assert row.trace_context is not None
            assert dict(row.trace_context) == dict(job.trace_context or {})
            assert row.status is JobStatus.QUEUED
            assert (row.attempts, row.last_error, row.worker_id, row.result, row.started_at) == (
                0,
                None,
                None,
                None,
                None,
            )
            assert_same_time(row.scheduled_at, when, backend.capabilities.timestamp_precision, "scheduled_at")
            assert_between(row.created_at, before, after, contract.slack(backend), "created_at")
            assert_between(row.updated_at, before, after, contract.slack(backend), "updated_at")

    async def test_enqueue_without_trace_context_stores_none(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue(backend, trace_context=None)
            assert row.trace_context is None

    async def test_enqueue_many_inserts_every_job(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            jobs = [new_job(args={"i": i}) for i in range(50)]
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
            for job in jobs:
                assert dict((await must_get(backend, job.id)).args) == dict(job.args)
            assert (await backend.queue_stats(QueueStatsParams())).queued == 50

    async def test_enqueue_many_is_all_or_none(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            existing = await enqueue(backend, args={"original": True})
            batch = [new_job(), new_job(), new_job(id=existing.id, args={"original": False})]
            with pytest.raises(Exception):  # noqa: B017 - each store has its own duplicate-key error
                await backend.enqueue_jobs(EnqueueJobsParams(jobs=batch))
            for job in batch[:2]:
                assert await backend.get_job(GetJobParams(job_id=job.id)) is None, "part of a failed batch was stored"
            assert await must_get(backend, existing.id) == existing
            assert (await backend.queue_stats(QueueStatsParams())).total == 1

    async def test_enqueue_of_an_empty_batch_stores_nothing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[]))
            assert (await backend.queue_stats(QueueStatsParams())).total == 0

    async def test_get_job_of_a_missing_id_returns_none(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            await enqueue(backend)
            assert await backend.get_job(GetJobParams(job_id=str(uuid.uuid4()))) is None

    async def test_list_jobs_filters_and_pages_newest_first(self, contract: ContractHarness) -> None:
        """`job_page` by queue and status, newest ``(created_at, id)`` first, and ``app.list_jobs``'s
        offset pages, which core serves from it, in the same order."""
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="w1", queue="a")
            rows = [await enqueue(backend, queue=queue) for queue in ("a", "b", "a", "a", "b")]
            everything = (await backend.job_page(JobPageParams())).rows
            assert sorted(row.id for row in everything) == sorted([*(row.id for row in rows), claimed.id])
            for listed in everything:
                assert_utc(listed.created_at, "created_at")
            keys = [(row.created_at, row.id) for row in everything]
            assert keys == sorted(keys, reverse=True)
            queued_in_a = await backend.job_page(JobPageParams(queues=["a"], statuses=[JobStatus.QUEUED]))
            assert sorted(row.id for row in queued_in_a.rows) == sorted(row.id for row in rows if row.queue == "a")
            app = Soniq(backend=backend, observers="")  # the harness closes the backend
            await app.connect()
            in_a = [row.id for row in everything if row.queue == "a"]
            first = await app.list_jobs(queue="a", limit=2, offset=0)
            second = await app.list_jobs(queue="a", limit=2, offset=2)
            assert [row["id"] for row in first + second] == in_a
            assert await app.list_jobs(queue="a", offset=10) == []
            queued = await app.list_jobs(queue="a", status="queued", limit=1, offset=1)
            assert [row["id"] for row in queued] == [row.id for row in queued_in_a.rows][1:2]

    @pytest.mark.parametrize("text", AWKWARD_TEXT, ids=range(len(AWKWARD_TEXT)))
    async def test_awkward_text_round_trips_in_queue_job_name_and_args(
        self, contract: ContractHarness, text: str
    ) -> None:
        async with contract.backend() as backend:
            args = {text: text, "list": [text, 1], "nested": {"value": text}}
            row = await enqueue(backend, queue=text, job_name=text, args=args)
            assert (row.queue, row.job_name, dict(row.args)) == (text, text, args)
            assert [r.id for r in (await backend.job_page(JobPageParams(queues=[text]))).rows] == [row.id]
            assert (await backend.queue_stats(QueueStatsParams(queue=text))).queued == 1
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id=text, queues=[text], limit=5, mark_started=False)
            )
            assert [(r.id, r.worker_id) for r in claimed] == [(row.id, text)]
            assert await backend.retry_job(
                RetryJobParams(job_id=row.id, worker_id=text, error=text, scheduled_at=utc_now())
            )
            assert (await must_get(backend, row.id)).last_error == text
            await backend.claim_jobs(ClaimJobsParams(worker_id="w1", queues=[text], limit=5, mark_started=False))
            assert await backend.dead_letter_job(
                DeadLetterJobParams(job_id=row.id, worker_id="w1", error=text, reason=text)
            )
            dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=row.id))
            assert dead is not None
            assert (dead.queue, dead.job_name, dict(dead.args), dead.last_error, dead.dead_letter_reason) == (
                text,
                text,
                args,
                text,
                text,
            )

    async def test_nul_bytes_in_args_values_round_trip(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            args = {"raw": "before\x00after", "list": ["\x00", "a\x00\x00b"], "nested": {"k": "\x00"}}
            row = await enqueue(backend, args=args)
            assert dict(row.args) == args
            (claimed,) = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=[row.queue], limit=1, mark_started=False)
            )
            assert dict(claimed.args) == args

    async def test_json_results_round_trip(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            for result in (None, 0, "text with 'quotes' and 🎉", [1, "two", None], {"ok": True, "n": 2.5}):
                row = await enqueue_and_claim(backend, worker_id="w1")
                assert await complete_one(backend, job_id=row.id, worker_id="w1", result=result)
                assert (await must_get(backend, row.id)).result == result
