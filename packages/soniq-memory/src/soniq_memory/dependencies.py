"""Job dependencies in the memory store (protocol 4).

`plan_inserts` decides, before anything is written, each new row's `waiting_on`
(or that it starts `cancelled`), so a batch with an unknown dependency stores
nothing. `settle` runs under the same lock as the terminal write it follows:
it reads only the finished row's edge list (dependency id -> dependent ids),
never a scan of waiting rows, and cascades a `cancel` through the dependents'
own edge lists.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from soniq.errors import UnknownDependencyError
from soniq.records import DependencyPolicy, JobRecord, JobStatus, NewJob

if TYPE_CHECKING:
    from soniq_memory.store import MemoryStore


class Finish(enum.Enum):
    """How a row stopped being pending, as its dependents see it."""

    DONE = "done"
    CANCELLED = "cancelled"
    DEAD_LETTERED = "dead-lettered"
    DELETED = "deleted"

    @property
    def resolves(self) -> bool:
        return self is Finish.DONE


def failure_message(dep_id: str, how: Finish) -> str:
    return f"dependency {dep_id} was {how.value}"


@dataclass(frozen=True, slots=True)
class InsertPlan:
    """What a new row starts as: pending dependencies (edges to record), or cancelled by a failed one."""

    waiting_on: int
    pending: tuple[str, ...]
    cancelled_by: str | None = None
    """`last_error` when a dependency already failed under policy `cancel`."""


def _state(store: MemoryStore, dep_id: str, batch: dict[str, JobStatus]) -> Finish | None:
    """A dependency as it stands now: None while pending, else how it finished."""
    status = batch.get(dep_id)
    if status is None:
        row = store.jobs.get(dep_id)
        status = row.status if row is not None else None
    if status is JobStatus.DONE:
        return Finish.DONE
    if status is JobStatus.CANCELLED:
        return Finish.CANCELLED
    if status is not None:
        return None
    return Finish.DEAD_LETTERED  # the caller checked it is a dead-letter row


def plan_inserts(store: MemoryStore, jobs: Sequence[NewJob], aliases: dict[str, str]) -> list[InsertPlan]:
    """One plan per job; raises `UnknownDependencyError` naming every missing id of the call.

    `aliases` maps the id of a job deduplicated onto an existing row to that row's id;
    jobs earlier in the call count as rows (a later one does not: no call can store a cycle)."""
    batch: dict[str, JobStatus] = {}
    plans: list[InsertPlan] = []
    missing: list[str] = []
    for job in jobs:
        if job.id in aliases:
            plans.append(InsertPlan(waiting_on=0, pending=()))
            continue
        pending: list[str] = []
        failed: str | None = None
        for given in job.depends_on:
            dep_id = aliases.get(given, given)
            if dep_id not in batch and dep_id not in store.jobs and dep_id not in store.dead_letters:
                missing.append(given)
                continue
            state = _state(store, dep_id, batch)
            if state is None:
                pending.append(dep_id)
            elif not state.resolves and failed is None:
                failed = failure_message(dep_id, state)
        if failed is not None and job.dependency_policy is DependencyPolicy.CANCEL:
            plan = InsertPlan(waiting_on=0, pending=(), cancelled_by=failed)
        else:
            plan = InsertPlan(waiting_on=len(pending), pending=tuple(pending))
        batch[job.id] = JobStatus.CANCELLED if plan.cancelled_by is not None else JobStatus.QUEUED
        plans.append(plan)
    if missing:
        raise UnknownDependencyError(list(dict.fromkeys(missing)))
    return plans


def record_edges(store: MemoryStore, row_id: str, pending: Sequence[str]) -> None:
    for dep_id in pending:
        store.dependents.setdefault(dep_id, []).append(row_id)


def settle(store: MemoryStore, job_id: str, how: Finish) -> None:
    """Resolve or fail the dependents of a row that just finished, recursively for cancels."""
    stack = [(job_id, how)]
    while stack:
        dep_id, finish = stack.pop()
        for dependent_id in store.dependents.pop(dep_id, ()):
            row = store.jobs.get(dependent_id)
            if row is None or row.status is not JobStatus.QUEUED or row.waiting_on <= 0:
                continue
            if finish.resolves or row.dependency_policy is DependencyPolicy.RUN:
                _count_down(store, row)
                continue
            store.put_job(
                replace(
                    row,
                    status=JobStatus.CANCELLED,
                    waiting_on=0,
                    last_error=failure_message(dep_id, finish),
                    updated_at=store.now(),
                )
            )
            store.publish_change(dependent_id)
            stack.append((dependent_id, Finish.CANCELLED))


def _count_down(store: MemoryStore, row: JobRecord) -> None:
    left = row.waiting_on - 1
    store.put_job(replace(row, waiting_on=left))
    if left == 0:
        store.wake(row.queue)
