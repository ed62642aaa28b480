"""Job dependencies: a row with ``waiting_on > 0`` is never claimed, and every
terminal write resolves or fails the rows that wait for it, in the same atomic step.

A dependency is resolved by `done` (a completion that deletes the row included) and failed by
`cancelled`, a move to the dead-letter table, or a `delete_job` before `done`. A failed
dependency cancels a dependent of policy `cancel` (recursively) and counts as resolved for one
of policy `run`. Retries, snoozes, nacks and requeueing rescues resolve nothing.

What a backend writes is core's rule, not its own: a new row is stored as
`soniq.backend.rules.plan_insert` says, a waiting dependent changes as
`soniq.backend.rules.on_dependency_finished` says, and the ``last_error`` of a dependent
cancelled by a failed dependency is exactly `soniq.backend.rules.dependency_failed_error`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from soniq.backend import (
    Backend,
    CancelJobParams,
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    DeleteJobParams,
    DependencyPolicy,
    EnqueueJobsParams,
    ExpireUnknownJobsParams,
    GetJobParams,
    JobPageParams,
    JobRecord,
    JobResult,
    JobStatus,
    NackJobParams,
    NewJob,
    QueueStatsParams,
    Rescue,
    RescueAction,
    RescueJobsParams,
    RetryJobParams,
    SnoozeJobParams,
    rules,
)
from soniq.backend.rules import DependencyState
from soniq.errors import UnknownDependencyError
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

FAN_IN = 200
"""Dependencies of the one fan-in job: enough to show the count, small enough to stay fast."""

CANCEL, RUN = DependencyPolicy.CANCEL, DependencyPolicy.RUN


def cancelled_message(dep_id: str) -> str:
    """Core's text for a dependent of a cancelled dependency (`rules.dependency_failed_error`)."""
    return rules.dependency_failed_error(dep_id, DependencyState.CANCELLED)


def dead_lettered_message(dep_id: str) -> str:
    return rules.dependency_failed_error(dep_id, DependencyState.DEAD_LETTERED)


def deleted_message(dep_id: str) -> str:
    return rules.dependency_failed_error(dep_id, DependencyState.DELETED)


async def add(backend: Backend, *jobs: NewJob) -> list[JobRecord]:
    """Enqueue `jobs` in one call and return them as stored."""
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=list(jobs)))
    return [await must_get(backend, job.id) for job in jobs]


async def claim_ids(backend: Backend, queue: str, *, worker_id: str = "dep-worker", limit: int = 50) -> list[str]:
    rows = await backend.claim_jobs(
        ClaimJobsParams(worker_id=worker_id, queues=[queue], limit=limit, mark_started=True)
    )
    return [row.id for row in rows]


async def claim_one(backend: Backend, job_id: str, queue: str, worker_id: str = "dep-worker") -> None:
    claimed = await claim_ids(backend, queue, worker_id=worker_id)
    if claimed != [job_id]:
        raise AssertionError(f"expected to claim exactly {job_id} from queue {queue!r}, got {claimed}")


async def assert_waiting(backend: Backend, job_id: str, waiting_on: int) -> JobRecord:
    row = await must_get(backend, job_id)
    assert (row.status, row.waiting_on) == (JobStatus.QUEUED, waiting_on), (
        f"dependent {job_id}: expected queued with waiting_on={waiting_on}, got {row.status.value} "
        f"with waiting_on={row.waiting_on} (last_error {row.last_error!r})"
    )
    return row


async def assert_claimable(backend: Backend, job_id: str, queue: str) -> None:
    row = await assert_waiting(backend, job_id, 0)
    await claim_one(backend, row.id, queue, worker_id="after-deps")


async def assert_not_claimable(backend: Backend, queue: str) -> None:
    claimed = await claim_ids(backend, queue, worker_id="too-early")
    assert claimed == [], f"a claim took {claimed} although every due row of {queue!r} waits on a dependency"


async def assert_cancelled_by(backend: Backend, job_id: str, message: str) -> None:
    row = await must_get(backend, job_id)
    assert (row.status, row.waiting_on, row.last_error) == (JobStatus.CANCELLED, 0, message), (
        f"dependent {job_id}: expected cancelled, waiting_on 0, last_error {message!r}; got "
        f"{row.status.value}, waiting_on {row.waiting_on}, last_error {row.last_error!r}"
    )


async def _fail_by_cancel(backend: Backend, dep: JobRecord) -> str:
    assert await backend.cancel_job(CancelJobParams(job_id=dep.id))
    return cancelled_message(dep.id)


async def _fail_by_dead_letter(backend: Backend, dep: JobRecord) -> str:
    await claim_one(backend, dep.id, dep.queue)
    assert await backend.dead_letter_job(
        DeadLetterJobParams(job_id=dep.id, worker_id="dep-worker", error="gave up", reason="max_retries_exceeded")
    )
    return dead_lettered_message(dep.id)


async def _fail_by_rescue(backend: Backend, dep: JobRecord) -> str:
    await claim_one(backend, dep.id, dep.queue, worker_id="lost-worker")
    row = await must_get(backend, dep.id)
    rescue = Rescue(
        job_id=dep.id,
        expected_worker_id="lost-worker",
        expected_updated_at=row.updated_at,
        action=RescueAction.DEAD_LETTER,
        attempts=1,
        error="worker lost",
        reason="worker_lost",
    )
    assert await backend.rescue_jobs(RescueJobsParams(rescues=[rescue])) == {dep.id}
    return dead_lettered_message(dep.id)


async def _fail_by_expiry(backend: Backend, dep: JobRecord) -> str:
    moved = await backend.expire_unknown_jobs(
        ExpireUnknownJobsParams(known_names=["ct.dependent"], older_than=0.0, error="nobody runs it")
    )
    assert moved == {dep.id}
    return dead_lettered_message(dep.id)


async def _fail_by_delete(backend: Backend, dep: JobRecord) -> str:
    assert await backend.delete_job(DeleteJobParams(job_id=dep.id))
    return deleted_message(dep.id)


Failure = Callable[[Backend, JobRecord], Awaitable[str]]
FAILURES: dict[str, Failure] = {
    "cancel_job": _fail_by_cancel,
    "dead_letter_job": _fail_by_dead_letter,
    "rescue_dead_letter": _fail_by_rescue,
    "expire_unknown_jobs": _fail_by_expiry,
    "delete_job": _fail_by_delete,
}


class DependencyContract:
    async def test_a_job_waiting_on_a_queued_dependency_is_not_claimed(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("deps")
            dep = new_job(queue=queue, priority=200)
            child = new_job(queue=queue, priority=1, depends_on=(dep.id,))
            _, stored_child = await add(backend, dep, child)
            assert stored_child.waiting_on == 1
            claimed = await claim_ids(backend, queue)
            assert claimed == [dep.id], f"a claim of every due row took {claimed}; the dependent must wait"
            after = await assert_waiting(backend, child.id, 1)
            assert fields_except(after) == fields_except(stored_child), "a claim must not touch a waiting row"

    async def test_completing_the_dependency_makes_the_dependent_claimable(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("deps")
            dep = new_job(queue=queue)
            child = new_job(queue=queue, depends_on=(dep.id,))
            await add(backend, dep, child)
            await claim_one(backend, dep.id, queue)
            assert await complete_one(backend, job_id=dep.id, worker_id="dep-worker", result={"ok": True})
            await assert_claimable(backend, child.id, queue)

    async def test_a_completion_that_deletes_the_row_resolves_too(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("deps")
            dep = new_job(queue=queue)
            child = new_job(queue=queue, depends_on=(dep.id,))
            await add(backend, dep, child)
            await claim_one(backend, dep.id, queue)
            written = await backend.complete_jobs(
                CompleteJobsParams(
                    worker_id="dep-worker", results=[JobResult(job_id=dep.id, result=None, delete_row=True)]
                )
            )
            assert written == {dep.id}
            assert await backend.get_job(GetJobParams(job_id=dep.id)) is None
            await assert_claimable(backend, child.id, queue)

    async def test_an_unknown_dependency_raises_and_stores_nothing_of_the_call(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("deps")
            known = await enqueue(backend, queue=queue)
            batch = [
                new_job(queue=queue),
                new_job(queue=queue, depends_on=(known.id,)),
                new_job(queue=queue, depends_on=(known.id, MISSING_JOB_ID)),
            ]
            with pytest.raises(UnknownDependencyError) as raised:
                await backend.enqueue_jobs(EnqueueJobsParams(jobs=batch))
            assert MISSING_JOB_ID in raised.value.missing
            assert known.id not in raised.value.missing
            for job in batch:
                assert await backend.get_job(GetJobParams(job_id=job.id)) is None
            assert (await backend.queue_stats(QueueStatsParams())).total == 1

    async def test_a_dependency_later_in_the_same_call_is_unknown(self, contract: ContractHarness) -> None:
        """Only jobs earlier in the call count: no batch can store a cycle."""
        async with contract.backend() as backend:
            queue = unique_queue("deps")
            later = new_job(queue=queue)
            first = new_job(queue=queue, depends_on=(later.id,))
            with pytest.raises(UnknownDependencyError):
                await backend.enqueue_jobs(EnqueueJobsParams(jobs=[first, later]))
            assert (await backend.queue_stats(QueueStatsParams())).total == 0

    async def test_a_deleted_done_row_can_no_longer_be_depended_on(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("deps")
            dep = await enqueue_and_claim(backend, worker_id="dep-worker", queue=queue)
            await backend.complete_jobs(
                CompleteJobsParams(
                    worker_id="dep-worker", results=[JobResult(job_id=dep.id, result=None, delete_row=True)]
                )
            )
            with pytest.raises(UnknownDependencyError):
                await backend.enqueue_jobs(EnqueueJobsParams(jobs=[new_job(queue=queue, depends_on=(dep.id,))]))
            assert (await backend.queue_stats(QueueStatsParams())).total == 0

    async def test_dependencies_earlier_in_the_same_call_are_accepted_in_a_chain(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("chain")
            a = new_job(queue=queue)
            b = new_job(queue=queue, depends_on=(a.id,))
            c = new_job(queue=queue, depends_on=(b.id,))
            stored = await add(backend, a, b, c)
            assert [row.waiting_on for row in stored] == [0, 1, 1]
            for current, following in ((a, b), (b, c)):
                await claim_one(backend, current.id, queue)
                assert await complete_one(backend, job_id=current.id, worker_id="dep-worker", result=None)
                await assert_waiting(backend, following.id, 0)
            await claim_one(backend, c.id, queue)

    async def test_the_dependency_fields_round_trip(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("deps")
            first, second = new_job(queue=queue), new_job(queue=queue)
            child = new_job(queue=queue, depends_on=(second.id, first.id), dependency_policy=RUN, limit_key="tenant-7")
            plain = new_job(queue=queue)
            await add(backend, first, second, child, plain)
            row = await must_get(backend, child.id)
            assert tuple(row.depends_on) == (second.id, first.id)
            assert row.dependency_policy is RUN
            assert (row.limit_key, row.waiting_on, row.cancel_requested) == ("tenant-7", 2, False)
            page = await backend.job_page(JobPageParams(queues=[queue]))
            listed = {listed.id: listed for listed in page.rows}
            assert tuple(listed[child.id].depends_on) == (second.id, first.id)
            assert listed[child.id].dependency_policy is RUN
            bare = await must_get(backend, plain.id)
            assert (tuple(bare.depends_on), bare.waiting_on, bare.dependency_policy, bare.limit_key) == (
                (),
                0,
                CANCEL,
                None,
            )

    async def test_a_dependency_already_done_counts_as_resolved(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("deps")
            done = await enqueue_and_claim(backend, worker_id="dep-worker", queue=queue)
            assert await complete_one(backend, job_id=done.id, worker_id="dep-worker", result=None)
            running = await enqueue_and_claim(backend, worker_id="dep-worker", queue=queue)
            both = new_job(queue=queue, depends_on=(done.id, running.id))
            only_done = new_job(queue=queue, depends_on=(done.id,))
            stored = await add(backend, both, only_done)
            assert [row.waiting_on for row in stored] == [1, 0], (
                "a done dependency is resolved, a processing one pending"
            )
            assert await claim_ids(backend, queue) == [only_done.id]

    @pytest.mark.parametrize("how", ["cancelled", "dead-lettered"])
    async def test_a_dependency_failed_before_the_enqueue_cancels_or_runs_by_policy(
        self, contract: ContractHarness, how: str
    ) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("deps")
            dep = await enqueue(backend, queue=queue)
            if how == "cancelled":
                message = await _fail_by_cancel(backend, dep)
            else:
                message = await _fail_by_dead_letter(backend, dep)
            cancels = new_job(queue=queue, depends_on=(dep.id,), dependency_policy=CANCEL)
            runs = new_job(queue=queue, depends_on=(dep.id,), dependency_policy=RUN)
            await add(backend, cancels, runs)
            await assert_cancelled_by(backend, cancels.id, message)
            await assert_claimable(backend, runs.id, queue)

    @pytest.mark.parametrize("failure", sorted(FAILURES))
    async def test_a_failed_dependency_cancels_its_dependents_and_theirs(
        self, contract: ContractHarness, failure: str
    ) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("deps")
            dep = new_job(queue=queue, job_name="ct.dep")
            child = new_job(queue=queue, job_name="ct.dependent", depends_on=(dep.id,), dependency_policy=CANCEL)
            grandchild = new_job(queue=queue, job_name="ct.dependent", depends_on=(child.id,), dependency_policy=RUN)
            great = new_job(queue=queue, job_name="ct.dependent", depends_on=(grandchild.id,), dependency_policy=CANCEL)
            stored_dep, *_ = await add(backend, dep, child, grandchild, great)
            message = await FAILURES[failure](backend, stored_dep)
            await assert_cancelled_by(backend, child.id, message)
            # The grandchild runs whatever happens to its dependency, so it is claimable, not cancelled.
            await assert_claimable(backend, grandchild.id, queue)
            await assert_waiting(backend, great.id, 1)

    async def test_a_cancelled_dependent_fails_its_own_dependents(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("deps")
            dep = new_job(queue=queue)
            child = new_job(queue=queue, depends_on=(dep.id,))
            grandchild = new_job(queue=queue, depends_on=(child.id,))
            sibling_of_grandchild = new_job(queue=queue, depends_on=(child.id,), dependency_policy=RUN)
            stored_dep, *_ = await add(backend, dep, child, grandchild, sibling_of_grandchild)
            await _fail_by_dead_letter(backend, stored_dep)
            await assert_cancelled_by(backend, child.id, dead_lettered_message(dep.id))
            await assert_cancelled_by(backend, grandchild.id, cancelled_message(child.id))
            await assert_claimable(backend, sibling_of_grandchild.id, queue)

    @pytest.mark.parametrize("failure", ["cancel_job", "dead_letter_job"])
    async def test_a_failed_dependency_counts_as_resolved_under_policy_run(
        self, contract: ContractHarness, failure: str
    ) -> None:
        async with contract.backend() as backend:
            queue, other_queue = unique_queue("deps"), unique_queue("other")
            failing, other = new_job(queue=queue), new_job(queue=other_queue)
            child = new_job(queue=queue, depends_on=(failing.id, other.id), dependency_policy=RUN)
            stored_failing, *_ = await add(backend, failing, other, child)
            await FAILURES[failure](backend, stored_failing)
            await assert_waiting(backend, child.id, 1)
            await claim_one(backend, other.id, other_queue)
            assert await complete_one(backend, job_id=other.id, worker_id="dep-worker", result=None)
            await assert_claimable(backend, child.id, queue)

    async def test_deleting_a_done_dependency_changes_nothing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("deps")
            dep = new_job(queue=queue)
            child = new_job(queue=queue, depends_on=(dep.id,), scheduled_at=utc_now() + timedelta(hours=1))
            await add(backend, dep, child)
            await claim_one(backend, dep.id, queue)
            assert await complete_one(backend, job_id=dep.id, worker_id="dep-worker", result=None)
            before = await assert_waiting(backend, child.id, 0)
            assert await backend.delete_job(DeleteJobParams(job_id=dep.id))
            assert (await must_get(backend, child.id)) == before

    async def test_retries_snoozes_nacks_and_requeues_resolve_nothing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("deps")
            dep = new_job(queue=queue)
            child = new_job(queue=queue, depends_on=(dep.id,))
            await add(backend, dep, child)
            due = utc_now() - timedelta(seconds=1)
            await claim_one(backend, dep.id, queue)
            assert await backend.retry_job(
                RetryJobParams(job_id=dep.id, worker_id="dep-worker", error="x", scheduled_at=due)
            )
            await assert_waiting(backend, child.id, 1)
            await claim_one(backend, dep.id, queue)
            assert await backend.snooze_job(SnoozeJobParams(job_id=dep.id, worker_id="dep-worker", scheduled_at=due))
            await assert_waiting(backend, child.id, 1)
            await claim_one(backend, dep.id, queue)
            assert await backend.nack_job(NackJobParams(job_id=dep.id, worker_id="dep-worker"))
            await assert_waiting(backend, child.id, 1)
            await claim_one(backend, dep.id, queue, worker_id="lost-worker")
            row = await must_get(backend, dep.id)
            requeue = Rescue(
                job_id=dep.id,
                expected_worker_id="lost-worker",
                expected_updated_at=row.updated_at,
                action=RescueAction.REQUEUE,
                attempts=row.attempts + 1,
            )
            assert await backend.rescue_jobs(RescueJobsParams(rescues=[requeue])) == {dep.id}
            await assert_waiting(backend, child.id, 1)
            await claim_one(backend, dep.id, queue)
            assert await complete_one(backend, job_id=dep.id, worker_id="dep-worker", result=None)
            await assert_claimable(backend, child.id, queue)

    async def test_a_fenced_write_that_applies_to_nothing_resolves_nothing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("deps")
            dep = new_job(queue=queue)
            child = new_job(queue=queue, depends_on=(dep.id,))
            await add(backend, dep, child)
            await claim_one(backend, dep.id, queue, worker_id="owner")
            assert not await complete_one(backend, job_id=dep.id, worker_id="intruder", result=None)
            assert not await backend.dead_letter_job(
                DeadLetterJobParams(job_id=dep.id, worker_id="intruder", error="x", reason="max_retries_exceeded")
            )
            assert not await backend.cancel_job(CancelJobParams(job_id=dep.id))
            await assert_waiting(backend, child.id, 1)

    async def test_fan_in_becomes_claimable_only_after_the_last_dependency(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            queue = unique_queue("fanin")
            deps = [new_job(queue=queue) for _ in range(FAN_IN)]
            sink = new_job(queue=queue, depends_on=tuple(dep.id for dep in deps))
            await backend.enqueue_jobs(EnqueueJobsParams(jobs=[*deps, sink]))
            await assert_waiting(backend, sink.id, FAN_IN)
            claimed = await claim_ids(backend, queue, limit=FAN_IN + 10)
            assert sorted(claimed) == sorted(dep.id for dep in deps), "the fan-in job was claimed with its deps"
            batches = [claimed[:120], claimed[120:199]]
            for batch in batches:
                written = await backend.complete_jobs(
                    CompleteJobsParams(
                        worker_id="dep-worker", results=[JobResult(job_id=i, result=None) for i in batch]
                    )
                )
                assert written == set(batch)
            await assert_waiting(backend, sink.id, 1)
            await assert_not_claimable(backend, queue)
            assert await complete_one(backend, job_id=claimed[-1], worker_id="dep-worker", result=None)
            await assert_claimable(backend, sink.id, queue)

    @pytest.mark.parametrize("policy", [CANCEL, RUN])
    @pytest.mark.parametrize("first_failure", ["none", "cancelled", "dead-lettered"])
    async def test_a_new_row_is_stored_as_cores_plan_insert_says(
        self, contract: ContractHarness, policy: DependencyPolicy, first_failure: str
    ) -> None:
        """Dependencies done, queued, processing, cancelled and dead-lettered at once: the row's
        status, `waiting_on` and `last_error` are `rules.plan_insert`'s, the first failed
        dependency naming the error."""
        async with contract.backend() as backend:
            queue = unique_queue("plan")
            done = await enqueue_and_claim(backend, worker_id="dep-worker", queue=unique_queue("done"))
            assert await complete_one(backend, job_id=done.id, worker_id="dep-worker", result=None)
            running = await enqueue_and_claim(backend, worker_id="dep-worker", queue=unique_queue("running"))
            queued = await enqueue(backend, queue=unique_queue("queued"))
            given: list[tuple[str, DependencyState]] = [
                (done.id, DependencyState.DONE),
                (queued.id, DependencyState.PENDING),
                (running.id, DependencyState.PENDING),
            ]
            if first_failure != "none":
                cancelled = await enqueue(backend, queue=unique_queue("cancelled"))
                await _fail_by_cancel(backend, cancelled)
                dead = await enqueue(backend, queue=unique_queue("dead"))
                await _fail_by_dead_letter(backend, dead)
                failed = [(cancelled.id, DependencyState.CANCELLED), (dead.id, DependencyState.DEAD_LETTERED)]
                if first_failure == "dead-lettered":
                    failed.reverse()
                given[1:1] = failed
            plan = rules.plan_insert(policy, given)
            job = new_job(queue=queue, depends_on=tuple(dep_id for dep_id, _ in given), dependency_policy=policy)
            (row,) = await add(backend, job)
            assert (row.status, row.waiting_on, row.last_error) == (plan.status, plan.waiting_on, plan.last_error), (
                f"policy {policy.value}, dependencies {[state.value for _, state in given]}: core's plan_insert "
                f"stores {plan.status.value} with waiting_on={plan.waiting_on} and last_error {plan.last_error!r}; "
                f"the backend stored {row.status.value} with waiting_on={row.waiting_on} and {row.last_error!r}"
            )

    @pytest.mark.parametrize("policy", [CANCEL, RUN])
    @pytest.mark.parametrize("how", [state.value for state in (DependencyState.DONE, *rules.FAILURES)])
    async def test_a_waiting_dependent_changes_as_cores_on_dependency_finished_says(
        self, contract: ContractHarness, policy: DependencyPolicy, how: str
    ) -> None:
        """One of two dependencies ends (done, cancelled, dead-lettered, deleted): the dependent is
        written exactly as `rules.on_dependency_finished` says, its `last_error` included."""
        async with contract.backend() as backend:
            queue = unique_queue("finished")
            dep, other = new_job(queue=unique_queue("dep")), new_job(queue=unique_queue("other"))
            child = new_job(queue=queue, depends_on=(dep.id, other.id), dependency_policy=policy)
            stored_dep, _, stored_child = await add(backend, dep, other, child)
            assert stored_child.waiting_on == 2
            state = DependencyState(how)
            if state is DependencyState.DONE:
                await claim_one(backend, dep.id, dep.queue)
                assert await complete_one(backend, job_id=dep.id, worker_id="dep-worker", result=None)
            elif state is DependencyState.CANCELLED:
                await _fail_by_cancel(backend, stored_dep)
            elif state is DependencyState.DEAD_LETTERED:
                await _fail_by_dead_letter(backend, stored_dep)
            else:
                await _fail_by_delete(backend, stored_dep)
            update = rules.on_dependency_finished(policy, state, dep.id, status=JobStatus.QUEUED, waiting_on=2)
            expected = (
                (JobStatus.CANCELLED, update.waiting_on, update.last_error)
                if update.cancelled
                else (JobStatus.QUEUED, update.waiting_on, None)
            )
            row = await must_get(backend, child.id)
            assert (row.status, row.waiting_on, row.last_error) == expected, (
                f"policy {policy.value}, dependency {how}: core's on_dependency_finished says "
                f"{update.action.value} to {expected}; the backend wrote "
                f"{(row.status.value, row.waiting_on, row.last_error)}"
            )
