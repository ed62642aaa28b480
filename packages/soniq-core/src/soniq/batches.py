"""Batches: jobs enqueued together whose callbacks run once, when every member has finished.

Built on what the store already guarantees, so a backend needs nothing new:

- The members and one *finisher* job (core's own, named `BATCH_JOB`) go into the store in one
  insert, all or none. The finisher depends on every member under policy ``run``
  (`DependencyStore`), so the store makes it claimable exactly when the last member has finished,
  whether done, dead-lettered or cancelled. Its id is the batch id.
- The finisher reads each member's state, then enqueues each callback that applies under a unique
  window keyed by the batch and the callback (`UniqueWindows`): a finisher that runs again (its
  worker was SIGKILLed after enqueueing, stale recovery hands it to another) finds the key held and
  stores nothing, so each callback is enqueued exactly once.

A member whose row is gone when counted (`result_ttl=0`, or deleted by hand) counts as done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from soniq import features
from soniq.backend import UniqueWindows, require_role
from soniq.context import JobContext
from soniq.dependencies import check_batch
from soniq.producing import Producing
from soniq.records import DependencyPolicy, NewJob
from soniq.validation import JobOptionsError
from soniq.windows import NO_TIMING

if TYPE_CHECKING:
    from soniq.app import Soniq

BATCH_JOB = "soniq.batch"
"""The finisher's job name: every worker that runs any job runs it too."""
MAX_BATCH_MEMBERS = 1_000
"""The most members one batch may have (the finisher waits for each: `MAX_DEPENDENCIES`)."""
CALLBACK_WINDOW = 30 * 86_400
"""How long a batch's callback key stays held: far longer than any re-run of its finisher."""
CALLBACKS = ("on_complete", "on_success", "on_failure")
READ_CHUNK = 50
"""Members read at once when counting."""
FINISHER_RETRIES = 10
"""The finisher only reads and enqueues: it is retried through a store's bad minutes."""


@dataclass(frozen=True, slots=True)
class BatchCounts:
    """How a batch's members stand: the dict `get_batch` returns and callbacks receive."""

    id: str
    total: int
    done: int
    dead_letter: int
    cancelled: int

    @property
    def finished(self) -> bool:
        return self.done + self.dead_letter + self.cancelled == self.total

    def as_dict(self, *, finished: bool = False) -> dict[str, Any]:
        counts = {
            "id": self.id,
            "total": self.total,
            "done": self.done,
            "dead_letter": self.dead_letter,
            "cancelled": self.cancelled,
        }
        return {**counts, "finished": self.finished} if finished else counts

    def applies(self, callback: str) -> bool:
        """Whether `callback` runs for this finished batch."""
        if callback == "on_success":
            return self.done == self.total
        if callback == "on_failure":
            return self.dead_letter + self.cancelled > 0
        return True


def check_members(items: object) -> list[tuple[Any, Mapping[str, Any]]]:
    """`enqueue_batch`'s members as ``(fn_or_name, kwargs)`` pairs, or `JobOptionsError` naming the fault."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise JobOptionsError(f"enqueue_batch takes a list of (job, kwargs) pairs, got {type(items).__name__}")
    if not items:
        raise JobOptionsError("enqueue_batch needs at least one member; a batch of none would never finish")
    if len(items) > MAX_BATCH_MEMBERS:
        raise JobOptionsError(
            f"enqueue_batch takes at most {MAX_BATCH_MEMBERS:,} members, got {len(items):,}; "
            "split the work into several batches"
        )
    members = []
    for index, item in enumerate(items):
        if not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[1], Mapping):
            raise JobOptionsError(
                f"enqueue_batch member {index} must be a (job, kwargs) pair with a dict of keyword arguments, "
                f"got {item!r}"[:300]
            )
        members.append((item[0], item[1]))
    return members


async def count_members(
    read: Callable[[str], Awaitable[dict[str, Any] | None]], batch_id: str, members: Sequence[str]
) -> BatchCounts:
    """Each member read as it stands now, `READ_CHUNK` at a time."""
    done = dead = cancelled = 0
    for start in range(0, len(members), READ_CHUNK):
        rows = await asyncio.gather(*(read(member) for member in members[start : start + READ_CHUNK]))
        for row in rows:
            status = None if row is None else row.get("status")
            if status is None or status == "done":
                done += 1
            elif status == "dead_letter":
                dead += 1
            elif status == "cancelled":
                cancelled += 1
    return BatchCounts(id=batch_id, total=len(members), done=done, dead_letter=dead, cancelled=cancelled)


def callback_key(batch_id: str, callback: str) -> str:
    return f"{BATCH_JOB}:{batch_id}:{callback}"


def register_finisher(app: Soniq) -> None:
    """Give `app` the finisher job (internal: not among the app's own jobs)."""

    async def finish_batch(
        ctx: JobContext,
        members: list[str],
        on_complete: str | None = None,
        on_success: str | None = None,
        on_failure: str | None = None,
    ) -> dict[str, Any]:
        counts = await count_members(app.get_job, ctx.job_id, members)
        targets = {"on_complete": on_complete, "on_success": on_success, "on_failure": on_failure}
        enqueued: dict[str, str] = {}
        for callback in CALLBACKS:
            target = targets[callback]
            if target is None or not counts.applies(callback):
                continue
            enqueued[callback] = await app.enqueue(
                target,
                args={"batch": counts.as_dict()},
                unique_for=CALLBACK_WINDOW,
                dedup_key=callback_key(ctx.job_id, callback),
            )
        return {**counts.as_dict(finished=True), "callbacks": enqueued}

    app.registry.add(
        finish_batch,
        name=BATCH_JOB,
        queue="default",
        max_retries=FINISHER_RETRIES,
        priority=100,
        timeout=None,
        internal=True,
    )


class Batching(Producing):
    """`enqueue_batch` and `get_batch`: `Producing` with batches, a mixin of `Soniq`."""

    if TYPE_CHECKING:

        async def get_job(self, job_id: str) -> dict[str, Any] | None: ...

    async def enqueue_batch(
        self,
        items: Sequence[tuple[Callable[..., Any] | str, Mapping[str, Any]]],
        /,
        *,
        on_complete: Callable[..., Any] | str | None = None,
        on_success: Callable[..., Any] | str | None = None,
        on_failure: Callable[..., Any] | str | None = None,
        queue: str | None = None,
    ) -> str:
        """Enqueue `items` (``(fn_or_name, kwargs)`` pairs, 1 to `MAX_BATCH_MEMBERS`) as one batch,
        all or none, and return its id.

        When every member has finished, each callback that applies is enqueued exactly once with
        the keyword `batch` = ``{"id", "total", "done", "dead_letter", "cancelled"}``: `on_complete`
        always, `on_success` when every member is done, `on_failure` when any was dead-lettered or
        cancelled. A callback must take the keyword `batch`. The batch's finisher runs on `queue`
        (default: the first callback's queue), so run a worker there. Needs the backend roles
        `DependencyStore` and `UniqueWindows`."""
        members = check_members(items)
        callbacks = {
            option: self._callback_name(option, target)
            for option, target in (("on_complete", on_complete), ("on_success", on_success), ("on_failure", on_failure))
            if target is not None
        }
        features.require_dependencies(self.backend)
        protocol: Any = UniqueWindows
        require_role(self.backend, protocol, "batches (app.enqueue_batch)")
        jobs: list[NewJob] = []
        for target, kwargs in members:
            (job,) = self._new_jobs(
                self._definition(target),
                [self._ref_args(target, kwargs)],
                queue=None,
                priority=None,
                scheduled_at=None,
                unique=False,
                timing=NO_TIMING,
            )
            jobs.append(job)
        finisher = self.registry.get(BATCH_JOB)
        assert finisher is not None  # every Soniq registers it
        if queue is None and callbacks:
            queue = self._definition(next(iter(callbacks.values()))).queue
        (finish,) = self._new_jobs(
            finisher,
            [{"members": [job.id for job in jobs], **callbacks}],
            queue=queue,
            priority=None,
            scheduled_at=None,
            unique=False,
            depends_on=tuple(job.id for job in jobs),
            dependency_policy=DependencyPolicy.RUN,
            timing=NO_TIMING,
        )
        jobs.append(finish)
        check_batch(jobs)
        await self._insert(self._announce(jobs), None)
        return finish.id

    async def get_batch(self, batch_id: str) -> dict[str, Any] | None:
        """The batch as it stands: ``{"id", "total", "done", "dead_letter", "cancelled", "finished"}``
        (a member whose row is gone counts as done), or None when no batch has that id (or its
        finisher's row has been pruned)."""
        row = await self.get_job(batch_id)
        if row is None or row.get("job_name") != BATCH_JOB:
            return None
        members = row.get("args", {}).get("members")
        if not isinstance(members, list):
            return None
        counts = await count_members(self.get_job, str(row["id"]), [str(member) for member in members])
        return counts.as_dict(finished=True)

    def _callback_name(self, option: str, target: Callable[..., Any] | str) -> str:
        """The callback's job name; a registered one must take the keyword `batch`."""
        if not (callable(target) or isinstance(target, str)):
            raise JobOptionsError(f"{option} must be a job (its function or name), got {target!r}")
        definition = self._definition(target)
        if definition.call_signature is not None or definition.args_model is not None:
            try:
                definition.bind_arguments({"batch": {}})
            except JobOptionsError:
                raise JobOptionsError(
                    f"{option} job {definition.name!r} must take a keyword argument 'batch' (the batch's counts)"
                ) from None
        return definition.name


__all__ = [
    "BATCH_JOB",
    "CALLBACKS",
    "MAX_BATCH_MEMBERS",
    "BatchCounts",
    "Batching",
    "callback_key",
    "check_members",
    "count_members",
    "register_finisher",
]
