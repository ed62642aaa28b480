"""Job dependencies in the memory store.

`plan_inserts` reads each dependency and asks core's `soniq.backend.rules.plan_insert`,
before anything is written, for each new row's `waiting_on` (or that it starts `cancelled`),
so a batch with an unknown dependency stores nothing. `settle` runs under the same lock as
the terminal write it follows: it reads only the finished row's edge list (dependency id -> dependent ids),
never a scan of waiting rows, writes what `rules.on_dependency_finished` says for
each dependent, and cascades a `cancel` through the dependents' own edge lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Protocol

from soniq.backend import DeadLetterRecord, JobRecord, JobStatus, NewJob, rules
from soniq.backend.rules import DependencyState, InsertPlan
from soniq.errors import UnknownDependencyError


class DependencyRows(Protocol):
    """What the dependency rules read and write of the memory store (`soniq_memory.store.MemoryStore`)."""

    jobs: dict[str, JobRecord]
    dead_letters: dict[str, DeadLetterRecord]
    dependents: dict[str, list[str]]

    def now(self) -> datetime: ...

    def put_job(self, record: JobRecord) -> None: ...

    def wake(self, queue: str) -> None: ...

    def publish_change(self, job_id: str, *, always: bool = False) -> None: ...


Finish = DependencyState
"""How a row stopped being pending, as its dependents see it (core's `rules.DependencyState`)."""


def _state(store: DependencyRows, dep_id: str, batch: dict[str, JobStatus]) -> DependencyState:
    """A dependency as it stands now (the caller checked it is a job row, a dead letter or earlier in the call)."""
    status = batch.get(dep_id)
    if status is None:
        row = store.jobs.get(dep_id)
        status = row.status if row is not None else None
    if status is None:
        return DependencyState.DEAD_LETTERED
    return rules.state_of_row(status)


def plan_inserts(store: DependencyRows, jobs: Sequence[NewJob], aliases: dict[str, str]) -> list[InsertPlan]:
    """One plan per job (`rules.plan_insert`); raises `UnknownDependencyError` naming every missing id of the call.

    `aliases` maps the id of a job deduplicated onto an existing row to that row's id;
    jobs earlier in the call count as rows (a later one does not: no call can store a cycle)."""
    batch: dict[str, JobStatus] = {}
    plans: list[InsertPlan] = []
    missing: list[str] = []
    for job in jobs:
        if job.id in aliases:
            plans.append(InsertPlan(JobStatus.QUEUED, 0, ()))
            continue
        states: list[tuple[str, DependencyState]] = []
        for given in job.depends_on:
            dep_id = aliases.get(given, given)
            if dep_id not in batch and dep_id not in store.jobs and dep_id not in store.dead_letters:
                missing.append(given)
                continue
            states.append((dep_id, _state(store, dep_id, batch)))
        plan = rules.plan_insert(job.dependency_policy, states)
        batch[job.id] = plan.status
        plans.append(plan)
    if missing:
        raise UnknownDependencyError(list(dict.fromkeys(missing)))
    return plans


def record_edges(store: DependencyRows, row_id: str, pending: Sequence[str]) -> None:
    for dep_id in pending:
        store.dependents.setdefault(dep_id, []).append(row_id)


def settle(store: DependencyRows, job_id: str, how: DependencyState) -> None:
    """Apply `rules.on_dependency_finished` to each dependent of a row that just finished, and to
    the dependents of every row that cancels in turn (as `cancelled`)."""
    stack = [(job_id, DependencyState(how))]
    while stack:
        dep_id, finish = stack.pop()
        for dependent_id in store.dependents.pop(dep_id, ()):
            row = store.jobs.get(dependent_id)
            if row is None:
                continue
            update = rules.on_dependency_finished(
                row.dependency_policy, finish, dep_id, status=row.status, waiting_on=row.waiting_on
            )
            if update.action is rules.DependentAction.LEAVE:
                continue
            if update.action is rules.DependentAction.COUNT_DOWN:
                store.put_job(replace(row, waiting_on=update.waiting_on))
                if update.released:
                    store.wake(row.queue)
                continue
            store.put_job(
                replace(
                    row,
                    status=JobStatus.CANCELLED,
                    waiting_on=update.waiting_on,
                    last_error=update.last_error,
                    updated_at=store.now(),
                )
            )
            store.publish_change(dependent_id)
            stack.append((dependent_id, DependencyState.CANCELLED))
