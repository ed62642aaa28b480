"""Fleet-wide limits inside `claim_jobs`.

A claim with `limits` takes a row only while every limit that matches it holds:
at most `max_concurrent` `processing` rows of the row's group in the whole store,
and at most `rate_limit` claims of the group per epoch-aligned window of
`rate_period` seconds. A row held back is passed over, never blocking the rows
behind it. Counting is from the real rows, so a slot is free again as soon as a
row leaves `processing`, whoever moved it.

Which group a row counts in is core's rule, `soniq.backend.rules.group_of`, and the
window a claim falls in is `soniq.backend.rules.window_start`: the tests compare with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from soniq.backend import (
    Backend,
    ClaimJobsParams,
    EnqueueJobsParams,
    GroupLimit,
    JobRecord,
    JobStatus,
    LimitScope,
    NackJobParams,
    NewJob,
    RetryJobParams,
    SnoozeJobParams,
    rules,
)
from soniq_contract_tests.harness import ContractHarness, complete_one, must_get, new_job, unique_queue, utc_now

RACING_INSTANCES = 3
"""Backend instances (their own connections) claiming under one limit, besides the test's own."""
RACING_CLAIMERS = 8
RACE_ROWS = 40
RACE_LIMIT = 3
HOLD_SECONDS = 0.5

RATE_PERIOD = 2.0
"""Window length of the rate tests: long enough that a slow claim still lands in the window it aimed at."""
WINDOW_MARGIN = 0.3
"""How far into a window (local clock) the rate tests start, to absorb a store clock that differs a little."""


def job_limit(
    name: str,
    *,
    max_concurrent: int | None = None,
    rate_limit: int | None = None,
    rate_period: float = 1.0,
    partitioned: bool = False,
) -> GroupLimit:
    return GroupLimit(LimitScope.JOB, name, max_concurrent, rate_limit, rate_period, partitioned)


def queue_limit(
    name: str,
    *,
    max_concurrent: int | None = None,
    rate_limit: int | None = None,
    rate_period: float = 1.0,
    partitioned: bool = False,
) -> GroupLimit:
    return GroupLimit(LimitScope.QUEUE, name, max_concurrent, rate_limit, rate_period, partitioned)


async def claim(
    backend: Backend,
    queue: str | Sequence[str],
    limits: Sequence[GroupLimit],
    *,
    worker_id: str = "limited-worker",
    limit: int = 50,
) -> list[JobRecord]:
    queues = [queue] if isinstance(queue, str) else list(queue)
    rows = await backend.claim_jobs(
        ClaimJobsParams(worker_id=worker_id, queues=queues, limit=limit, mark_started=True, limits=limits)
    )
    for row in rows:
        if row.status is not JobStatus.PROCESSING or row.worker_id != worker_id:
            raise AssertionError(f"a limited claim by {worker_id} returned {row!r}")
    return rows


async def add(backend: Backend, jobs: Sequence[NewJob]) -> None:
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=list(jobs)))


async def aligned_window(period: float) -> float:
    """Sleep to `WINDOW_MARGIN` past the start of the next epoch-aligned window (`rules.window_start`);
    return its end (epoch s)."""
    now = time.time()
    start = rules.window_start(datetime.fromtimestamp(now, UTC), period).timestamp() + period
    await asyncio.sleep(start + WINDOW_MARGIN - now)
    return start + period


class LimitContract:
    async def test_max_concurrent_per_job_name_counts_across_workers(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("lim")
            await add(backend, [new_job(queue=queue, job_name="ct.limited") for _ in range(5)])
            limits = [job_limit("ct.limited", max_concurrent=2)]
            first = await claim(backend, queue, limits, worker_id="w1")
            assert len(first) == 2, f"max_concurrent=2 but one claim took {len(first)} rows"
            assert await claim(backend, queue, limits, worker_id="w2") == []
            assert await complete_one(backend, job_id=first[0].id, worker_id="w1", result=None)
            again = await claim(backend, queue, limits, worker_id="w2")
            assert len(again) == 1, f"one slot was freed by a completion; the claim took {len(again)}"
            assert await claim(backend, queue, limits, worker_id="w3") == []

    async def test_max_concurrent_per_queue_counts_across_workers(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("lim")
            await add(backend, [new_job(queue=queue, job_name=f"ct.name{n}") for n in range(6)])
            limits = [queue_limit(queue, max_concurrent=3)]
            taken = [len(await claim(backend, queue, limits, worker_id=f"w{n}", limit=2)) for n in range(3)]
            assert taken == [2, 1, 0], f"claims of limit 2 under max_concurrent=3 took {taken}"

    async def test_rows_claimed_without_limits_count_against_the_limit(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("lim")
            await add(backend, [new_job(queue=queue, job_name="ct.limited") for _ in range(4)])
            plain = await backend.claim_jobs(
                ClaimJobsParams(worker_id="plain", queues=[queue], limit=2, mark_started=True)
            )
            assert len(plain) == 2
            limits = [job_limit("ct.limited", max_concurrent=2)]
            assert await claim(backend, queue, limits) == [], "two rows of the group are processing already"
            assert len(await claim(backend, queue, [job_limit("ct.limited", max_concurrent=3)])) == 1

    async def test_a_claim_without_limits_ignores_groups(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("lim")
            await add(backend, [new_job(queue=queue, job_name="ct.limited") for _ in range(4)])
            assert len(await claim(backend, queue, [job_limit("ct.limited", max_concurrent=1)])) == 1
            rest = await backend.claim_jobs(
                ClaimJobsParams(worker_id="plain", queues=[queue], limit=10, mark_started=True)
            )
            assert len(rest) == 3

    async def test_partitioned_limits_give_each_limit_key_its_own_slots(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("lim")
            keys: list[str | None] = ["tenant-a", "tenant-b", None]
            await add(
                backend,
                [new_job(queue=queue, job_name="ct.tenant", limit_key=key) for key in keys for _ in range(3)],
            )
            limits = [job_limit("ct.tenant", max_concurrent=2, partitioned=True)]
            first = await claim(backend, queue, limits, worker_id="w1", limit=100)
            per_key = sorted((row.limit_key or "") for row in first)
            assert per_key == ["", "", "tenant-a", "tenant-a", "tenant-b", "tenant-b"], per_key
            assert await claim(backend, queue, limits, worker_id="w2") == []
            freed = next(row for row in first if row.limit_key is None)
            assert await complete_one(backend, job_id=freed.id, worker_id="w1", result=None)
            again = await claim(backend, queue, limits, worker_id="w2")
            assert [row.limit_key for row in again] == [None]

    async def test_an_unpartitioned_limit_groups_every_limit_key_together(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("lim")
            await add(backend, [new_job(queue=queue, job_name="ct.tenant", limit_key=f"k{n}") for n in range(4)])
            assert len(await claim(backend, queue, [job_limit("ct.tenant", max_concurrent=2)])) == 2

    async def test_a_full_group_is_passed_over_for_the_rows_behind_it(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("lim")
            limited = [new_job(queue=queue, job_name="ct.limited", priority=1) for _ in range(4)]
            others = [new_job(queue=queue, job_name="ct.free", priority=50) for _ in range(3)]
            await add(backend, [*limited, *others])
            rows = await claim(backend, queue, [job_limit("ct.limited", max_concurrent=1)], limit=10)
            names = sorted(row.job_name for row in rows)
            assert names == ["ct.free"] * 3 + ["ct.limited"], f"claimed {names}"
            for job in limited:
                row = await must_get(backend, job.id)
                if row.status is JobStatus.QUEUED:
                    assert (row.worker_id, row.started_at) == (None, None), "a row held back must stay untouched"

    async def test_every_matching_limit_must_hold(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("lim")
            await add(backend, [new_job(queue=queue, job_name="ct.a") for _ in range(3)])
            await add(backend, [new_job(queue=queue, job_name="ct.b") for _ in range(3)])
            limits = [queue_limit(queue, max_concurrent=3), job_limit("ct.a", max_concurrent=1)]
            rows = await claim(backend, queue, limits, limit=10)
            assert sorted(row.job_name for row in rows) in (["ct.a", "ct.b", "ct.b"],), [r.job_name for r in rows]
            assert await claim(backend, queue, limits) == []

    async def test_a_limit_on_another_group_does_not_hold_a_row_back(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("lim")
            await add(backend, [new_job(queue=queue, job_name="ct.free") for _ in range(3)])
            limits = [job_limit("ct.other", max_concurrent=1), queue_limit(unique_queue("elsewhere"), max_concurrent=1)]
            assert len(await claim(backend, queue, limits, limit=10)) == 3

    async def test_leaving_processing_frees_the_slot(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("lim")
            await add(backend, [new_job(queue=queue, job_name="ct.limited") for _ in range(6)])
            limits = [job_limit("ct.limited", max_concurrent=1)]
            later = utc_now() + timedelta(hours=1)

            async def leave(what: str, row: JobRecord) -> bool:
                if what == "nack":
                    return await backend.nack_job(NackJobParams(job_id=row.id, worker_id="w1"))
                if what == "retry":
                    retry = RetryJobParams(job_id=row.id, worker_id="w1", error="x", scheduled_at=later)
                    return await backend.retry_job(retry)
                if what == "snooze":
                    return await backend.snooze_job(SnoozeJobParams(job_id=row.id, worker_id="w1", scheduled_at=later))
                return await complete_one(backend, job_id=row.id, worker_id="w1", result=None)

            for what in ("nack", "retry", "snooze", "complete"):
                (held,) = await claim(backend, queue, limits, worker_id="w1")
                assert await claim(backend, queue, limits, worker_id="w2") == [], f"before the {what}"
                assert await leave(what, held)
                (taken,) = await claim(backend, queue, limits, worker_id="w2")
                assert await backend.nack_job(NackJobParams(job_id=taken.id, worker_id="w2"))

    async def test_rows_waiting_on_a_dependency_are_not_claimed_by_a_limited_claim(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("lim")
            dep = new_job(queue=unique_queue("dep"))
            waiting = new_job(queue=queue, job_name="ct.limited", depends_on=(dep.id,))
            await add(backend, [dep, waiting])
            assert await claim(backend, queue, [job_limit("ct.limited", max_concurrent=5)]) == []
            assert await claim(backend, queue, [job_limit("ct.limited", rate_limit=5, rate_period=60.0)]) == []
            assert (await must_get(backend, waiting.id)).waiting_on == 1

    async def test_rate_limit_allows_n_claims_per_window(self, contract: ContractHarness) -> None:
        """Within one epoch-aligned window at most `rate_limit` claims of the group; the next window
        allows as many again. Rows of other groups are not held back."""
        async with contract.backend() as backend:
            queue = unique_queue("rate")
            await add(backend, [new_job(queue=queue, job_name="ct.rated") for _ in range(20)])
            await add(backend, [new_job(queue=queue, job_name="ct.free", priority=200) for _ in range(2)])
            limits = [job_limit("ct.rated", rate_limit=3, rate_period=RATE_PERIOD)]
            for attempt in range(3):
                window_end = await aligned_window(RATE_PERIOD)
                first = await claim(backend, queue, limits, worker_id="w1", limit=20)
                second = await claim(backend, queue, limits, worker_id="w2", limit=20)
                if time.time() > window_end - WINDOW_MARGIN:
                    continue  # this machine was too slow to stay within one window: try a fresh one
                rated = [row for row in first + second if row.job_name == "ct.rated"]
                assert len(rated) == 3, f"rate_limit=3 per {RATE_PERIOD:g}s window, yet one window claimed {len(rated)}"
                if attempt == 0:
                    assert sorted(row.job_name for row in first + second).count("ct.free") == 2
                window_end = await aligned_window(RATE_PERIOD)
                third = await claim(backend, queue, limits, worker_id="w3", limit=20)
                assert len(third) == 3, f"the next window should allow 3 claims again, took {len(third)}"
                return
            raise AssertionError("three windows in a row ended before two claims returned: the store is too slow")

    async def test_partitioned_rate_limits_count_each_limit_key_alone(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("rate")
            await add(backend, [new_job(queue=queue, limit_key=key) for key in ("a", "b", None) for _ in range(3)])
            limits = [queue_limit(queue, rate_limit=1, rate_period=60.0, partitioned=True)]
            rows = await claim(backend, queue, limits, limit=20)
            # A 60 s window: one claim lies within a single window but for a few ms a minute.
            assert sorted(row.limit_key or "" for row in rows) in (["", "a", "b"],), [r.limit_key for r in rows]

    async def test_concurrent_limited_claimers_never_exceed_max_concurrent(self, contract: ContractHarness) -> None:
        """Claimers on several backend instances (when the store is shared) race for the group's
        slots, each holding what it got for a moment; no instant sees more than the limit."""
        async with contract.backend() as backend:
            queue = unique_queue("race")
            await add(backend, [new_job(queue=queue, job_name="ct.limited") for _ in range(RACE_ROWS)])
            limits = [job_limit("ct.limited", max_concurrent=RACE_LIMIT)]
            held: set[str] = set()
            full = asyncio.Event()
            most = 0
            done: list[str] = []
            async with contextlib.AsyncExitStack() as stack:
                instances = [backend]
                if backend.capabilities.shared_across_processes:
                    instances += [
                        await stack.enter_async_context(contract.peer(backend)) for _ in range(RACING_INSTANCES)
                    ]

                async def claimer(n: int) -> None:
                    nonlocal most
                    instance, worker_id = instances[n % len(instances)], f"racer-{n}"
                    give_up = time.monotonic() + 60
                    while len(done) < RACE_ROWS and time.monotonic() < give_up:
                        rows = await claim(instance, queue, limits, worker_id=worker_id, limit=2)
                        # A row is processing from before the claim returns until after the completion
                        # is sent, so `held` is never more than the store's processing rows.
                        held.update(row.id for row in rows)
                        most = max(most, len(held))
                        if not rows:
                            await asyncio.sleep(0.005)
                            continue
                        if len(held) >= RACE_LIMIT:
                            full.set()
                        # Hold the rows until the group is full (or a moment passed), so that a store that
                        # hands out more slots than it has gets the chance to, even on a slow machine.
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(full.wait(), HOLD_SECONDS)
                        await asyncio.sleep(0.01)
                        for row in rows:
                            held.discard(row.id)
                            full.clear()
                            assert await complete_one(instance, job_id=row.id, worker_id=worker_id, result=None)
                            done.append(row.id)

                await asyncio.gather(*(claimer(n) for n in range(RACING_CLAIMERS)))
            assert most <= RACE_LIMIT, f"{most} rows of a group limited to {RACE_LIMIT} were processing at once"
            assert most == RACE_LIMIT, f"{RACING_CLAIMERS} claimers never filled the {RACE_LIMIT} slots (most {most})"
            assert len(set(done)) == len(done) == RACE_ROWS, f"{len(done)} completions of {RACE_ROWS} rows"

    @pytest.mark.parametrize("scope", [LimitScope.QUEUE, LimitScope.JOB])
    @pytest.mark.parametrize("partitioned", [False, True], ids=["whole", "partitioned"])
    @pytest.mark.parametrize("kind", ["max_concurrent", "rate_limit"])
    async def test_rows_are_grouped_as_cores_group_of_says(
        self, contract: ContractHarness, scope: LimitScope, partitioned: bool, kind: str
    ) -> None:
        """Rows of two job names and three limit keys (one None) under one limit of 1: one claim
        takes exactly one row of each group `rules.group_of` names, never two rows core puts in one
        group, and every row the limit does not match."""
        async with contract.backend() as backend:
            queue = unique_queue("groups")
            names = (f"ct.grouped.{queue}", f"ct.other.{queue}")
            keys: tuple[str | None, ...] = ("a", "b", None)
            jobs = [new_job(queue=queue, job_name=name, limit_key=key) for name in names for key in keys]
            await add(backend, jobs)
            limit = GroupLimit(
                scope,
                queue if scope is LimitScope.QUEUE else names[0],
                max_concurrent=1 if kind == "max_concurrent" else None,
                rate_limit=1 if kind == "rate_limit" else None,
                rate_period=60.0,  # one claim lies within a single window but for a few ms a minute
                partitioned=partitioned,
            )
            group_of = {
                job.id: rules.group_of(limit, queue=job.queue, job_name=job.job_name, limit_key=job.limit_key)
                for job in jobs
            }
            claimed = await claim(backend, queue, [limit], limit=len(jobs))
            taken = Counter(group_of[row.id] for row in claimed if group_of[row.id] is not None)
            wanted = {group: 1 for group in group_of.values() if group is not None}
            shown = {row.id: (row.job_name, row.limit_key) for row in claimed}
            assert taken == wanted, (
                f"a {kind} of 1 on {limit.key} ({'partitioned' if partitioned else 'whole'}): core's group_of "
                f"puts these rows in {len(wanted)} group(s), one row each may run; the claim took {shown}"
            )
            free = {job.id for job in jobs if group_of[job.id] is None}
            missing = free - {row.id for row in claimed}
            assert not missing, f"rows the limit does not match were held back: {sorted(missing)}"
            assert await claim(backend, queue, [limit], worker_id="second") == [], "every group was full"
