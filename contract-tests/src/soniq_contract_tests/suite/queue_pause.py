"""`QueuePauseStore`: stored queue pauses, and claims that leave a paused queue's rows alone.

`pause_queue` is True only when the queue was not paused (a second pause replaces the reason,
keeps `paused_at`, and is False); `resume_queue` is True only when it was paused;
`paused_queues` lists every pause ordered by queue name. A claim sent `excluded_queues`
neither claims nor touches those queues' rows (not even `updated_at`), on the plain and the
limited claim path, while it claims every other due row. A paused queue still takes enqueues,
and the pause is stored: another backend instance on the same store sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta

from hypothesis import strategies as st

from soniq.backend import (
    Backend,
    ClaimJobsParams,
    EnqueueJobsParams,
    GetJobParams,
    GroupLimit,
    JobStatus,
    LimitScope,
    PausedQueue,
    PauseQueueParams,
    QueueStatsParams,
    ResumeQueueParams,
)
from soniq_contract_tests.harness import (
    ContractHarness,
    assert_between,
    enqueue,
    must_get,
    new_job,
    unique_queue,
    utc_now,
)
from soniq_contract_tests.suite._examples import draw, plain_names, storable_text

CONCURRENT_PAUSES = 12


async def pause(backend: Backend, queue: str, reason: str | None = None) -> bool:
    written = await backend.pause_queue(PauseQueueParams(queue=queue, reason=reason))
    if not isinstance(written, bool):
        raise AssertionError(f"pause_queue({queue!r}) returned {written!r}, not a bool")
    return written


async def resume(backend: Backend, queue: str) -> bool:
    written = await backend.resume_queue(ResumeQueueParams(queue=queue))
    if not isinstance(written, bool):
        raise AssertionError(f"resume_queue({queue!r}) returned {written!r}, not a bool")
    return written


async def paused(backend: Backend) -> list[PausedQueue]:
    rows: object = await backend.paused_queues()
    if not isinstance(rows, list) or not all(isinstance(row, PausedQueue) for row in rows):
        raise AssertionError(f"paused_queues() returned {rows!r}, not a list of PausedQueue")
    return rows


@contextlib.asynccontextmanager
async def another_instance(contract: ContractHarness, backend: Backend) -> AsyncIterator[Backend]:
    """A second instance on `backend`'s store, connected after the first wrote; `backend` itself
    where instances do not share a store (as ``memory://``), so the test still runs there."""
    if not await shares_state(contract, backend):
        yield backend
        return
    async with contract.peer(backend) as other:
        yield other


async def shares_state(contract: ContractHarness, backend: Backend) -> bool:
    """Whether a second instance on `backend`'s namespace reaches the same rows (a store of its own
    per instance, like ``memory://``, does not)."""
    probe = await enqueue(backend, queue=unique_queue("probe"))
    async with contract.peer(backend) as other:
        return await other.get_job(GetJobParams(job_id=probe.id)) is not None


class QueuePauseContract:
    async def test_pause_and_resume_say_whether_they_changed_anything(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            assert await paused(backend) == []
            assert await resume(backend, "never-paused") is False
            assert await pause(backend, "emails", "deploy") is True
            assert await pause(backend, "emails", "deploy") is False
            assert [row.queue for row in await paused(backend)] == ["emails"]
            assert await resume(backend, "emails") is True
            assert await resume(backend, "emails") is False
            assert await paused(backend) == []
            assert await pause(backend, "emails") is True, "a resumed queue pauses afresh"

    async def test_a_pause_stores_its_reason_and_the_time(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            before = utc_now()
            assert await pause(backend, "reports", "migrating the reports table")
            assert await pause(backend, "quiet")
            after = utc_now()
            rows = {row.queue: row for row in await paused(backend)}
            assert rows["reports"].reason == "migrating the reports table"
            assert rows["quiet"].reason is None
            for row in rows.values():
                assert_between(row.paused_at, before, after, contract.slack(backend), f"paused_at of {row.queue}")

    async def test_pausing_again_replaces_the_reason_and_keeps_paused_at(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            assert await pause(backend, "billing", "first reason")
            (first,) = await paused(backend)
            await asyncio.sleep(backend.capabilities.timestamp_precision.total_seconds() + 0.01)
            assert await pause(backend, "billing", "second reason") is False
            (second,) = await paused(backend)
            assert second.reason == "second reason"
            assert second.paused_at == first.paused_at
            assert await pause(backend, "billing") is False
            (third,) = await paused(backend)
            assert (third.reason, third.paused_at) == (None, first.paused_at)

    async def test_paused_queues_are_ordered_by_name_with_their_reasons(self, contract: ContractHarness) -> None:
        cases = draw(
            st_pauses(),
            [{"b": "x", "a": None, "c": "z"}, {"q10": "ten", "q2": "two", "q1": None}],
        )
        async with contract.backend() as backend:
            for case in cases:
                for queue, reason in case.items():
                    assert await pause(backend, queue, reason) is True, f"first pause of {queue!r} in {case!r}"
                rows = await paused(backend)
                assert [(row.queue, row.reason) for row in rows] == sorted(case.items()), case
                for queue in case:
                    assert await resume(backend, queue) is True, f"resume of {queue!r} in {case!r}"
                assert await paused(backend) == []

    async def test_any_storable_reason_round_trips(self, contract: ContractHarness) -> None:
        reasons = draw(storable_text(max_size=200), ["", "deploy 2026-12-06", "ünïcødé ✓", "line one\nline two"])
        async with contract.backend() as backend:
            for reason in reasons:
                await pause(backend, "texts", reason)
                (row,) = await paused(backend)
                assert row.reason == reason, f"stored reason {reason!r} came back as {row.reason!r}"

    async def test_claim_leaves_excluded_queues_untouched_and_claims_the_rest(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            held_queue, open_queue = unique_queue("paused"), unique_queue("open")
            held = [await enqueue(backend, queue=held_queue, priority=1) for _ in range(3)]
            free = [await enqueue(backend, queue=open_queue, priority=200) for _ in range(3)]
            assert await pause(backend, held_queue, "deploy")
            for queues in (None, [held_queue, open_queue]):
                claimed = await backend.claim_jobs(
                    ClaimJobsParams(
                        worker_id="w1", queues=queues, limit=10, mark_started=True, excluded_queues=[held_queue]
                    )
                )
                if queues is None:
                    assert sorted(row.id for row in claimed) == sorted(row.id for row in free)
                else:
                    assert claimed == [], "every open row was claimed already"
            for row in held:
                assert await must_get(backend, row.id) == row, "a row of an excluded queue was touched"
            stats = await backend.queue_stats(QueueStatsParams(queue=held_queue))
            assert (stats.queued, stats.processing) == (3, 0)

    async def test_a_claim_of_only_excluded_queues_claims_nothing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            first, second = unique_queue("a"), unique_queue("b")
            rows = [await enqueue(backend, queue=queue) for queue in (first, second, first)]
            for queues in (None, [first], [first, second]):
                claimed = await backend.claim_jobs(
                    ClaimJobsParams(
                        worker_id="w1", queues=queues, limit=10, mark_started=False, excluded_queues=[first, second]
                    )
                )
                assert claimed == [], f"queues={queues!r} with both excluded claimed {claimed!r}"
            for row in rows:
                assert await must_get(backend, row.id) == row

    async def test_an_excluded_queue_is_claimed_again_once_no_longer_excluded(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("held")
            row = await enqueue(backend, queue=queue)
            assert await pause(backend, queue)
            names = [item.queue for item in await paused(backend)]
            assert (
                await backend.claim_jobs(
                    ClaimJobsParams(worker_id="w1", queues=None, limit=5, mark_started=False, excluded_queues=names)
                )
                == []
            )
            assert await resume(backend, queue)
            names = [item.queue for item in await paused(backend)]
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=None, limit=5, mark_started=False, excluded_queues=names)
            )
            assert [item.id for item in claimed] == [row.id]
            assert claimed[0].status is JobStatus.PROCESSING

    async def test_a_limited_claim_leaves_excluded_queues_untouched(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            held_queue, open_queue = unique_queue("paused"), unique_queue("open")
            limits = [
                GroupLimit(LimitScope.JOB, "contract.job", 10, None, 1.0, False),
                GroupLimit(LimitScope.QUEUE, held_queue, 10, None, 1.0, False),
            ]
            held = [await enqueue(backend, queue=held_queue) for _ in range(3)]
            free = [await enqueue(backend, queue=open_queue) for _ in range(2)]
            claimed = await backend.claim_jobs(
                ClaimJobsParams(
                    worker_id="w1",
                    queues=[held_queue, open_queue],
                    limit=10,
                    mark_started=True,
                    limits=limits,
                    excluded_queues=[held_queue],
                )
            )
            assert sorted(row.id for row in claimed) == sorted(row.id for row in free)
            for row in held:
                assert await must_get(backend, row.id) == row, "a limited claim touched a row of an excluded queue"

    async def test_a_paused_queue_takes_enqueues(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("paused")
            assert await pause(backend, queue, "deploy")
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[new_job(queue=queue) for _ in range(4)]))
            row = await enqueue(backend, queue=queue, scheduled_at=utc_now() + timedelta(hours=1))
            assert row.status is JobStatus.QUEUED
            stats = await backend.queue_stats(QueueStatsParams(queue=queue))
            assert (stats.queued, stats.total) == (5, 5)
            assert [item.queue for item in await paused(backend)] == [queue], "an enqueue changed the pause"

    async def test_a_pause_is_stored_for_every_instance_on_the_store(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            assert await pause(backend, "imports", "deploy")
            (mine,) = await paused(backend)
            async with another_instance(contract, backend) as later:
                assert await paused(later) == [mine]
                assert await pause(later, "imports", "still deploying") is False
                assert await resume(later, "exports") is False
            (after,) = await paused(backend)
            assert (after.reason, after.paused_at) == ("still deploying", mine.paused_at)
            async with another_instance(contract, backend) as later:
                assert await resume(later, "imports") is True
            assert await paused(backend) == []

    async def test_concurrent_pauses_of_one_queue_leave_one_pause(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend, contextlib.AsyncExitStack() as stack:
            instances = [backend]
            if await shares_state(contract, backend):
                instances += [await stack.enter_async_context(contract.peer(backend)) for _ in range(2)]
            reasons = [f"reason {n}" for n in range(CONCURRENT_PAUSES)]
            results = await asyncio.gather(
                *(pause(instances[n % len(instances)], "contended", reason) for n, reason in enumerate(reasons))
            )
            assert results.count(True) == 1, f"{results.count(True)} concurrent pauses reported a new pause"
            rows = await paused(backend)
            assert [row.queue for row in rows] == ["contended"]
            assert rows[0].reason in reasons
            resumed = await asyncio.gather(*(resume(instances[n % len(instances)], "contended") for n in range(6)))
            assert resumed.count(True) == 1, f"{resumed.count(True)} concurrent resumes reported removing the pause"
            assert await paused(backend) == []


def st_pauses() -> st.SearchStrategy[dict[str, str | None]]:
    """A set of queue names, each with a reason or none."""
    return st.dictionaries(plain_names(), st.one_of(st.none(), storable_text(max_size=30)), min_size=1, max_size=6)
