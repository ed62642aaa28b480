"""Job dependencies: checking `depends_on`, and the call descriptions `app.chain` takes.

The store decides when a job becomes claimable (`Backend.enqueue_jobs`, "Dependencies" in
`soniq.backend`); core checks what it can before anything is stored, the same way on every
backend: the ids are text, each appears once, and within one `enqueue_jobs` call a job waits
only for jobs *before* it, so no call can ever store a cycle (a job that waits for itself,
directly or through others). Ids that no row has are the store's to refuse
(`UnknownDependencyError`), in the same transaction as the insert.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from soniq.errors import DependencyCycleError
from soniq.limits import shown
from soniq.records import DependencyPolicy, NewJob
from soniq.validation import JobOptionsError

if TYPE_CHECKING:
    from soniq.routing import TaskRef

DependsOn = str | uuid.UUID | Iterable[str | uuid.UUID] | None


MAX_DEPENDENCIES = 1_000
"""The most distinct ids one job's `depends_on` may name; more is `JobOptionsError`."""


def normalize_depends_on(value: DependsOn) -> tuple[str, ...]:
    """`depends_on` as distinct ids in the order given: one id, or any iterable of ids (a repeat is kept once).

    At most `MAX_DEPENDENCIES` distinct ids; the check stops reading at the first id past that."""
    if value is None:
        return ()
    items: Iterable[object] = (value,) if isinstance(value, (str, uuid.UUID)) else value
    if isinstance(value, (bytes, Mapping)) or not isinstance(items, Iterable):
        raise JobOptionsError(f"depends_on must be a job id or a list of job ids, got {shown(value)}")
    seen: dict[str, None] = {}
    for item in items:
        if isinstance(item, uuid.UUID):
            item = str(item)
        if not isinstance(item, str) or not item.strip():
            raise JobOptionsError(f"depends_on must hold job ids (non-empty strings), got {shown(item)}")
        seen.setdefault(item, None)
        if len(seen) > MAX_DEPENDENCIES:
            raise JobOptionsError(
                f"depends_on names more than {MAX_DEPENDENCIES:,} job ids; a job may wait for at most "
                f"{MAX_DEPENDENCIES:,} (chain through an intermediate job to wait for more)"
            )
    return tuple(seen)


def check_policy(value: object) -> DependencyPolicy:
    """``"cancel"``, ``"run"`` or a `DependencyPolicy`; anything else is `JobOptionsError`."""
    if isinstance(value, DependencyPolicy):
        return value
    try:
        return DependencyPolicy(str(value).strip().lower() if isinstance(value, str) else value)
    except ValueError:
        choices = ", ".join(repr(p.value) for p in DependencyPolicy)
        raise JobOptionsError(f"dependency_policy must be one of {choices}, got {value!r}") from None


def check_batch(jobs: Sequence[NewJob]) -> None:
    """Refuse, with `DependencyCycleError`, a batch in which a job id appears twice, a job waits for
    itself, or a job waits for a job of the batch that comes after it (the only ways a cycle could be
    stored). Costs nothing for a batch without dependencies."""
    if not any(job.depends_on for job in jobs):
        return
    position = {}
    for index, job in enumerate(jobs):
        if job.id in position:
            raise DependencyCycleError(f"job id {job.id} appears twice in one enqueue; nothing was stored")
        position[job.id] = index
    for index, job in enumerate(jobs):
        for dependency in job.depends_on:
            if dependency == job.id:
                raise DependencyCycleError(f"job {job.id} cannot depend on itself; nothing was stored")
            later = position.get(dependency)
            if later is not None and later > index:
                raise DependencyCycleError(
                    f"job {job.id} depends on job {dependency}, which comes after it in the same enqueue: "
                    "a job may wait only for jobs enqueued before it; nothing was stored"
                )


@dataclass(frozen=True, slots=True)
class JobCall:
    """One call of a job, described and not yet enqueued: what `app.chain` takes.

    Made with ``fn.call(**kwargs)`` (or ``fn.options(queue=...).call(**kwargs)``), or directly,
    ``JobCall("billing.charge", {"order_id": 7})`` for a job known by name.
    """

    job: Callable[..., Any] | str | TaskRef
    args: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    scheduled_at: datetime | timedelta | int | float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.args, Mapping):
            raise TypeError(f"JobCall args must be a mapping of keyword arguments, got {self.args!r}")
        object.__setattr__(self, "args", dict(self.args))
