"""`VersionedJobs`: rows carry the version of the code that enqueued them; claims skip newer rows.

`enqueue_jobs` stores `NewJob.version` (1 when none is sent) and every read returns it. A claim
sent `max_versions` neither claims nor touches a row whose name is a key and whose version is
above that key's value, on the plain and the limited claim path; names that are not keys are
claimed at any version. Workers register the versions they run, and `list_workers` returns them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hypothesis import strategies as st

from soniq.backend import (
    ClaimJobsParams,
    DeadLetterJobParams,
    EnqueueJobsParams,
    GetDeadLetterParams,
    GroupLimit,
    JobStatus,
    LimitScope,
    NackJobParams,
    RegisterWorkerParams,
    ReplayDeadLetterParams,
    RetryJobParams,
    WorkerInfo,
)
from soniq_contract_tests.harness import (
    ContractHarness,
    enqueue,
    enqueue_and_claim,
    must_get,
    new_job,
    unique_queue,
    utc_now,
)
from soniq_contract_tests.suite._examples import draw

NAMES = ("ct.alpha", "ct.beta", "ct.gamma")


@dataclass(frozen=True)
class VersionCase:
    """Rows as (job name, version), and the `max_versions` a claim sends."""

    rows: tuple[tuple[str, int], ...]
    max_versions: Mapping[str, int]

    def claimable(self, name: str, version: int) -> bool:
        return name not in self.max_versions or version <= self.max_versions[name]


def version_cases() -> st.SearchStrategy[VersionCase]:
    rows = st.lists(st.tuples(st.sampled_from(NAMES), st.integers(1, 4)), min_size=1, max_size=8)
    limits = st.dictionaries(st.sampled_from(NAMES), st.integers(1, 4), max_size=3)
    return st.builds(lambda r, m: VersionCase(tuple(r), m), rows, limits)


FIXED_CASES = [
    VersionCase((("ct.alpha", 1), ("ct.alpha", 2), ("ct.alpha", 3)), {"ct.alpha": 2}),
    VersionCase((("ct.alpha", 1), ("ct.beta", 2), ("ct.gamma", 9)), {"ct.alpha": 1, "ct.beta": 1}),
    VersionCase((("ct.alpha", 2), ("ct.beta", 2)), {"ct.alpha": 1, "ct.beta": 1}),
    VersionCase((("ct.alpha", 5), ("ct.beta", 1)), {}),
]


class VersionedJobsContract:
    async def test_enqueue_stores_the_version_and_every_read_returns_it(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("v")
            default = await enqueue(backend, queue=queue, priority=1)
            newer = await enqueue(backend, queue=queue, priority=2, version=3)
            assert (default.version, newer.version) == (1, 3)
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=[queue], limit=5, mark_started=True)
            )
            assert sorted((row.id, row.version) for row in claimed) == sorted([(default.id, 1), (newer.id, 3)])

    async def test_the_version_is_kept_through_nack_and_retry(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="w1", mark_started=True, version=2)
            assert await backend.nack_job(NackJobParams(job_id=row.id, worker_id="w1", handler_started=True))
            assert (await must_get(backend, row.id)).version == 2
            await backend.claim_jobs(ClaimJobsParams(worker_id="w1", queues=[row.queue], limit=1, mark_started=True))
            assert await backend.retry_job(
                RetryJobParams(job_id=row.id, worker_id="w1", error="boom", scheduled_at=utc_now())
            )
            assert (await must_get(backend, row.id)).version == 2

    async def test_a_dead_letter_keeps_the_version_and_a_replay_queues_it_again(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="w1", mark_started=True, version=3)
            assert await backend.dead_letter_job(
                DeadLetterJobParams(job_id=row.id, worker_id="w1", error="boom", reason="max_retries_exceeded")
            )
            dead = await backend.get_dead_letter(GetDeadLetterParams(job_id=row.id))
            assert dead is not None
            assert dead.version == 3, "the dead-letter row lost the version its arguments were written for"
            replayed = await backend.replay_dead_letter(
                ReplayDeadLetterParams(job_id=row.id, new_job_id=f"{row.id}-again", scheduled_at=utc_now())
            )
            assert replayed is not None
            again = await must_get(backend, replayed)
            assert (again.status, again.version) == (JobStatus.QUEUED, 3)

    async def test_a_claim_skips_newer_rows_and_leaves_them_untouched(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("v")
            old = await enqueue(backend, queue=queue, job_name="ct.alpha", version=1, priority=10)
            same = await enqueue(backend, queue=queue, job_name="ct.alpha", version=2, priority=20)
            newer = await enqueue(backend, queue=queue, job_name="ct.alpha", version=3, priority=1)
            claimed = await backend.claim_jobs(
                ClaimJobsParams(
                    worker_id="old-worker", queues=[queue], limit=10, mark_started=True, max_versions={"ct.alpha": 2}
                )
            )
            assert sorted(row.id for row in claimed) == sorted([old.id, same.id])
            assert await must_get(backend, newer.id) == newer, "a claim touched a row newer than its code"
            again = await backend.claim_jobs(
                ClaimJobsParams(
                    worker_id="old-worker", queues=None, limit=10, mark_started=False, max_versions={"ct.alpha": 2}
                )
            )
            assert again == []
            assert await must_get(backend, newer.id) == newer
            taken = await backend.claim_jobs(
                ClaimJobsParams(
                    worker_id="new-worker", queues=[queue], limit=10, mark_started=True, max_versions={"ct.alpha": 3}
                )
            )
            assert [(row.id, row.version, row.worker_id) for row in taken] == [(newer.id, 3, "new-worker")]

    async def test_names_not_in_max_versions_are_claimed_at_any_version(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("v")
            other = await enqueue(backend, queue=queue, job_name="ct.beta", version=7)
            held = await enqueue(backend, queue=queue, job_name="ct.alpha", version=2)
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id="w1", queues=None, limit=10, mark_started=True, max_versions={"ct.alpha": 1})
            )
            assert [(row.id, row.version) for row in claimed] == [(other.id, 7)]
            assert await must_get(backend, held.id) == held

    async def test_a_claim_honours_any_max_versions(self, contract: ContractHarness) -> None:
        cases = draw(version_cases(), FIXED_CASES)
        async with contract.backend() as backend:
            for case in cases:
                queue = unique_queue("v")
                jobs = [new_job(queue=queue, job_name=name, version=version) for name, version in case.rows]
                await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))
                expected = {job.id for job in jobs if case.claimable(job.job_name, job.version)}
                before = {job.id: await must_get(backend, job.id) for job in jobs if job.id not in expected}
                claimed = await backend.claim_jobs(
                    ClaimJobsParams(
                        worker_id="w1", queues=[queue], limit=50, mark_started=True, max_versions=case.max_versions
                    )
                )
                assert {row.id for row in claimed} == expected, f"{case}: claimed {[row.version for row in claimed]}"
                for job_id, row in before.items():
                    assert await must_get(backend, job_id) == row, f"{case}: a skipped row was touched"

    async def test_a_limited_claim_skips_newer_rows(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("v")
            limits = [
                GroupLimit(LimitScope.JOB, "ct.alpha", 10, None, 1.0, False),
                GroupLimit(LimitScope.QUEUE, queue, 10, None, 1.0, False),
            ]
            old = await enqueue(backend, queue=queue, job_name="ct.alpha", version=1)
            newer = await enqueue(backend, queue=queue, job_name="ct.alpha", version=2, priority=1)
            other = await enqueue(backend, queue=queue, job_name="ct.beta", version=4)
            claimed = await backend.claim_jobs(
                ClaimJobsParams(
                    worker_id="w1",
                    queues=[queue],
                    limit=10,
                    mark_started=True,
                    limits=limits,
                    max_versions={"ct.alpha": 1, "ct.beta": 4},
                )
            )
            assert sorted(row.id for row in claimed) == sorted([old.id, other.id])
            assert await must_get(backend, newer.id) == newer, "a limited claim touched a row newer than its code"

    async def test_max_versions_and_excluded_queues_together(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            paused, served = unique_queue("paused"), unique_queue("served")
            held = await enqueue(backend, queue=paused, job_name="ct.alpha", version=1)
            newer = await enqueue(backend, queue=served, job_name="ct.alpha", version=2)
            runnable = await enqueue(backend, queue=served, job_name="ct.alpha", version=1)
            claimed = await backend.claim_jobs(
                ClaimJobsParams(
                    worker_id="w1",
                    queues=None,
                    limit=10,
                    mark_started=True,
                    excluded_queues=[paused],
                    max_versions={"ct.alpha": 1},
                )
            )
            assert [row.id for row in claimed] == [runnable.id]
            assert await must_get(backend, held.id) == held
            assert await must_get(backend, newer.id) == newer
            assert (await must_get(backend, runnable.id)).status is JobStatus.PROCESSING

    async def test_workers_register_the_versions_they_run(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            versions = {"ct.alpha": 2, "ct.beta": 1}
            await backend.register_worker(
                RegisterWorkerParams(
                    worker=WorkerInfo(
                        id="versioned",
                        hostname="contract-host",
                        pid=1,
                        queues=None,
                        concurrency=2,
                        job_names=tuple(sorted(versions)),
                        job_versions=versions,
                    )
                )
            )
            await backend.register_worker(
                RegisterWorkerParams(
                    worker=WorkerInfo(id="plain", hostname="contract-host", pid=2, queues=None, concurrency=1)
                )
            )
            workers = {worker.id: worker for worker in await backend.list_workers()}
            assert dict(workers["versioned"].job_versions or {}) == versions
            assert workers["versioned"].job_versions is not None
            assert not workers["plain"].job_versions, workers["plain"]
