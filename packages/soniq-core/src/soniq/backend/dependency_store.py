"""The `DependencyStore` role: jobs that wait for other jobs.

The role adds no method. A backend that declares it promises that `QueueStore.enqueue_jobs`
honours `NewJob.depends_on` and `dependency_policy`, and that every write that ends a row
applies the cascade below in the same transaction or script. Enqueueing a job with
`depends_on` on a backend that does not declare the role raises `MissingBackendRoleError`.

A row with ``waiting_on > 0`` is never claimed. A dependency is *resolved* when its row
becomes `done` (including a completion that deletes the row), and *failed* when its row
becomes `cancelled` (by `cancel_job`, `request_cancel`, `finish_cancel` or a cascade), is
moved to the dead-letter table (`dead_letter_job`, `rescue_jobs`, `expire_unknown_jobs`),
or is deleted by `delete_job` before it was `done`. In the same transaction or script as
that write, every dependent row still `queued` with ``waiting_on > 0`` is updated as
`soniq.backend.rules.on_dependency_finished` decides: on resolved, or on failed with
policy `run`, ``waiting_on -= 1`` (at 0 the row becomes claimable and workers may be woken
as for an insert); on failed with policy `cancel`, the dependent becomes `cancelled` with
``waiting_on = 0`` and ``last_error`` = `soniq.backend.rules.dependency_failed_error`, which
in turn fails its own dependents. Retries, snoozes, nacks and rescues that requeue are not
terminal and resolve nothing. Fan-in stays cheap: one dependency's resolution touches its
dependents only (an edge list per dependency), never a scan of all waiting rows.

At enqueue, every id in a job's `depends_on` must be a job row, a dead-letter row, or a job
earlier in the same call; otherwise `soniq.errors.UnknownDependencyError` (listing the
missing ids) is raised and nothing of the call is stored. Each dependency is read as it
stands in the same transaction, and `soniq.backend.rules.plan_insert` says how the new row
is stored (its `waiting_on`, or `cancelled` with its `last_error`).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.records import DependencyPolicy

VERSION = 1
"""The version of `DependencyStore` this soniq-core speaks."""


@runtime_checkable
class DependencyStore(Protocol):
    """A marker: enqueue and every ending write apply the dependency rules (see the module's text)."""


__all__ = ["VERSION", "DependencyPolicy", "DependencyStore"]
