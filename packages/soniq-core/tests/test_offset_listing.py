"""`app.list_jobs` and `app.dead_letter.list` serve `offset` from the stores' keyset pages.

The stores read only pages (`job_page`, `dead_letter_page`): core skips `offset` rows by
walking them, whole reads of `MAX_PAGE_LIMIT` rows while more than that are left to skip, then
one read of what is left to skip plus the page asked for. The rows, their order (newest first,
ties broken by the larger id) and the empty answer past the end are what the stores' own offset
listings gave. Rows are inserted in one batch, so many share a timestamp and the id decides.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from soniq import Soniq
from soniq.dead_letter import DeadLetterFilter
from soniq.params import (
    ClaimJobsParams,
    DeadLetterJobParams,
    DeadLetterPageParams,
    EnqueueJobsParams,
    JobPageParams,
)
from soniq.records import DeadLetterPage, JobPage, NewJob
from soniq.validation import MAX_PAGE_LIMIT
from soniq_memory import MemoryBackend

pytestmark = pytest.mark.asyncio

ROWS = MAX_PAGE_LIMIT + 7
"""One whole skip read and a few rows beyond it."""


class CountingBackend(MemoryBackend):
    """Records the page reads core makes."""

    def __init__(self) -> None:
        super().__init__()
        self.job_reads: list[JobPageParams] = []
        self.dead_reads: list[DeadLetterPageParams] = []

    async def job_page(self, params: JobPageParams, /) -> JobPage:
        self.job_reads.append(params)
        return await super().job_page(params)

    async def dead_letter_page(self, params: DeadLetterPageParams, /) -> DeadLetterPage:
        self.dead_reads.append(params)
        return await super().dead_letter_page(params)


def _jobs(count: int, queue: str) -> list[NewJob]:
    due = datetime.now(UTC) - timedelta(seconds=5)
    return [
        NewJob(
            id=str(uuid.uuid4()),
            job_name="offset.job",
            args={"n": n},
            queue=queue,
            priority=100,
            scheduled_at=due,
            max_attempts=3,
        )
        for n in range(count)
    ]


@pytest_asyncio.fixture
async def app() -> AsyncIterator[Soniq]:
    backend = CountingBackend()
    app = Soniq(backend=backend, observers="")
    await app.connect()
    try:
        yield app
    finally:
        await app.close()


def _backend(app: Soniq) -> CountingBackend:
    backend = app.backend
    assert isinstance(backend, CountingBackend)
    return backend


def _ids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["id"] for row in rows]


async def test_list_jobs_offset_walks_pages_and_keeps_the_order(app: Soniq) -> None:
    backend = _backend(app)
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=_jobs(ROWS, "deep")))
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=_jobs(3, "other")))
    rows = [row for row in backend.jobs.values() if row.queue == "deep"]
    expected = [row.id for row in sorted(rows, key=lambda r: (r.created_at, r.id), reverse=True)]

    assert _ids(await app.list_jobs(queue="deep", limit=5)) == expected[:5]
    backend.job_reads.clear()
    assert _ids(await app.list_jobs(queue="deep", limit=5, offset=MAX_PAGE_LIMIT + 3)) == expected[-4:]
    skip, last = backend.job_reads
    assert (skip.limit, skip.before, skip.include_results) == (MAX_PAGE_LIMIT, None, False)
    assert last.before is not None
    assert last.limit == 3 + 5
    assert _ids(await app.list_jobs(queue="deep", limit=MAX_PAGE_LIMIT, offset=2)) == expected[2 : MAX_PAGE_LIMIT + 2]
    assert _ids(await app.list_jobs(queue="deep", offset=MAX_PAGE_LIMIT)) == expected[MAX_PAGE_LIMIT:]
    assert await app.list_jobs(queue="deep", offset=ROWS) == []
    assert await app.list_jobs(queue="deep", offset=2 * MAX_PAGE_LIMIT) == []
    assert await app.list_jobs(queue="deep", offset=ROWS - 1) != []
    assert len(await app.list_jobs(status="queued", limit=MAX_PAGE_LIMIT)) == MAX_PAGE_LIMIT
    assert len(await app.list_jobs(status="queued", offset=ROWS, limit=10)) == 3


async def test_list_jobs_skips_without_results_and_returns_them_when_asked(app: Soniq) -> None:
    backend = _backend(app)
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=_jobs(MAX_PAGE_LIMIT + 1, "deep")))
    backend.job_reads.clear()
    (row,) = await app.list_jobs(queue="deep", offset=MAX_PAGE_LIMIT, include_results=True)
    assert [read.include_results for read in backend.job_reads] == [False, True]
    assert row["result"] is None  # queued: nothing stored yet, but the key is there


async def test_dead_letter_list_offset_walks_pages_and_keeps_the_order(app: Soniq) -> None:
    backend = _backend(app)
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=_jobs(ROWS, "dl")))
    claimed = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=["dl"], limit=ROWS, mark_started=True))
    assert len(claimed) == ROWS
    for row in claimed:
        reason = "max_attempts" if row.args["n"] % 2 else "worker_lost"
        assert await backend.dead_letter_job(
            DeadLetterJobParams(job_id=row.id, worker_id="w", error="x", reason=reason)
        )
    dead = sorted(backend.dead_letters.values(), key=lambda d: (d.moved_to_dead_letter_at, d.id), reverse=True)
    expected = [d.id for d in dead]

    assert _ids(await app.dead_letter.list("dl", limit=5)) == expected[:5]
    backend.dead_reads.clear()
    assert _ids(await app.dead_letter.list("dl", limit=5, offset=MAX_PAGE_LIMIT + 3)) == expected[-4:]
    assert [read.limit for read in backend.dead_reads] == [MAX_PAGE_LIMIT, 8]
    assert await app.dead_letter.list("dl", offset=ROWS) == []
    assert await app.dead_letter.list(offset=2 * MAX_PAGE_LIMIT) == []

    lost = [d.id for d in dead if d.dead_letter_reason == "worker_lost"]
    wanted = DeadLetterFilter(reasons=["worker_lost"], limit=4, offset=len(lost) - 2)
    assert _ids(await app.dead_letter.list(filter=wanted)) == lost[-2:]
    everything = DeadLetterFilter(queues=["dl"], limit=ROWS, offset=1)
    assert _ids(await app.dead_letter.list(filter=everything)) == expected[1:]
