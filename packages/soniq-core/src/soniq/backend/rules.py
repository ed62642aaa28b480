"""The rules a backend applies rather than decides: the dependency cascade, limit groups, rate windows.

Every function here is pure (no I/O, no clock, no store): a backend reads its inputs in its own
transaction or script and writes what the rule returns, so that every backend stores the same
values. Where a store must compute inside the database for atomicity, it computes the inputs
there and takes the outputs (an error text, the policies a failure cancels, a group, a window
start) from these functions, as query parameters.

Dependencies (see `soniq.backend.dependency_store`):

- `plan_insert`: how a new row is stored, from its dependencies as read at enqueue.
- `on_dependency_finished`: what one dependent row does when a dependency of it ends.
- `dependency_failed_error`: the exact ``last_error`` of a row cancelled by a failed dependency.

Limits (see `soniq.backend.limit_store`):

- `group_of`: the group a row counts in under a `GroupLimit`, or None when the limit does not match it.
- `window_start` / `window_start_us`: the epoch-aligned rate window a moment falls in.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from soniq.params import GroupLimit, LimitScope
from soniq.records import DependencyPolicy, JobStatus

# -- dependencies ----------------------------------------------------------------------


class DependencyState(str, enum.Enum):
    """A dependency as a dependent sees it: still pending, resolved, or failed (and how)."""

    PENDING = "pending"
    """Its row is `queued` or `processing`."""
    DONE = "done"
    """Its row became `done` (a completion that deleted the row included): resolved."""
    CANCELLED = "cancelled"
    """Its row became `cancelled` (by a cancel, or by a cascade): failed."""
    DEAD_LETTERED = "dead-lettered"
    """Its row was moved to the dead-letter table: failed."""
    DELETED = "deleted"
    """Its row was deleted by `delete_job` before it was `done`: failed."""

    @property
    def failed(self) -> bool:
        """True for the states that fail a dependent (cancelled, dead-lettered, deleted)."""
        return self in _FAILED

    @property
    def finished(self) -> bool:
        """True for every state but `PENDING`."""
        return self is not DependencyState.PENDING


_FAILED = frozenset({DependencyState.CANCELLED, DependencyState.DEAD_LETTERED, DependencyState.DELETED})

FAILURES: tuple[DependencyState, ...] = (
    DependencyState.CANCELLED,
    DependencyState.DEAD_LETTERED,
    DependencyState.DELETED,
)
"""Every way a dependency fails, in a fixed order."""


def state_of_row(status: JobStatus | str) -> DependencyState:
    """A job row's `status` as a dependency state (a dead-letter row is `DependencyState.DEAD_LETTERED`)."""
    status = JobStatus(status)
    if status is JobStatus.DONE:
        return DependencyState.DONE
    if status is JobStatus.CANCELLED:
        return DependencyState.CANCELLED
    return DependencyState.PENDING


def dependency_failed_error(dependency_id: str, how: DependencyState | str) -> str:
    """The ``last_error`` of a row cancelled because dependency `dependency_id` failed `how`:
    ``dependency <id> was cancelled``, ``... was dead-lettered`` or ``... was deleted``."""
    state = DependencyState(how)
    if not state.failed:
        raise ValueError(f"a dependency that is {state.value} did not fail; no dependent is cancelled by it")
    return f"dependency {dependency_id} was {state.value}"


@dataclass(frozen=True, slots=True)
class InsertPlan:
    """How a new row is stored: `queued` waiting on `waiting_on` dependencies, or `cancelled`."""

    status: JobStatus
    """`JobStatus.QUEUED`, or `JobStatus.CANCELLED` when a dependency already failed under policy `cancel`."""
    waiting_on: int
    """The row's ``waiting_on``: its distinct pending dependencies (0 when cancelled)."""
    pending: tuple[str, ...]
    """The pending dependencies, each once, in the order given: one edge each (none when cancelled)."""
    last_error: str | None = None
    """`dependency_failed_error` of the first failed dependency when cancelled, else None."""

    @property
    def cancelled(self) -> bool:
        return self.status is JobStatus.CANCELLED


def plan_insert(policy: DependencyPolicy | str, dependency_states: Iterable[tuple[str, DependencyState]]) -> InsertPlan:
    """The plan of a new row from ``(dependency id, state)`` pairs, in `depends_on` order, each read
    in the enqueue's transaction (a job earlier in the same call counts as stored).

    A done dependency is resolved. A failed one (the first, in the order given, names the error)
    cancels the row under policy `cancel`, and counts as resolved under policy `run`. Every
    pending one, counted once however often it is named, is waited for."""
    policy = DependencyPolicy(policy)
    pending: dict[str, None] = {}
    failed: tuple[str, DependencyState] | None = None
    for dependency_id, state in dependency_states:
        state = DependencyState(state)
        if state is DependencyState.PENDING:
            pending.setdefault(dependency_id, None)
        elif state.failed and failed is None:
            failed = (dependency_id, state)
    if failed is not None and policy is DependencyPolicy.CANCEL:
        return InsertPlan(JobStatus.CANCELLED, 0, (), dependency_failed_error(*failed))
    return InsertPlan(JobStatus.QUEUED, len(pending), tuple(pending))


class DependentAction(str, enum.Enum):
    """What a dependent row does when one of its dependencies finishes."""

    LEAVE = "leave"
    """Nothing: the row is not `queued` with ``waiting_on > 0`` (it ended, or waits for nothing)."""
    COUNT_DOWN = "count_down"
    """``waiting_on -= 1``; at 0 the row is claimable (wake workers as for an insert)."""
    CANCEL = "cancel"
    """The row becomes `cancelled` with ``waiting_on = 0`` and `DependentUpdate.last_error`, and its
    own dependents then see it as `DependencyState.CANCELLED`."""


@dataclass(frozen=True, slots=True)
class DependentUpdate:
    """The write `on_dependency_finished` asks for: the action and the row's new values."""

    action: DependentAction
    waiting_on: int
    """The row's ``waiting_on`` after the update."""
    last_error: str | None = None
    """Set only with `DependentAction.CANCEL`: the text to store as the row's ``last_error``."""

    @property
    def released(self) -> bool:
        """The row counted down to 0: it is claimable now."""
        return self.action is DependentAction.COUNT_DOWN and self.waiting_on == 0

    @property
    def cancelled(self) -> bool:
        return self.action is DependentAction.CANCEL


def on_dependency_finished(
    policy: DependencyPolicy | str,
    finished: DependencyState | str,
    dependency_id: str,
    *,
    status: JobStatus | str,
    waiting_on: int,
) -> DependentUpdate:
    """What one dependent row (its `policy`, `status` and `waiting_on` as read in the same write)
    does when its dependency `dependency_id` finishes as `finished`.

    Only a row still `queued` with ``waiting_on > 0`` changes. Resolved (done), or failed under
    policy `run`: it counts down. Failed under policy `cancel`: it is cancelled with
    `dependency_failed_error`."""
    state = DependencyState(finished)
    if not state.finished:
        raise ValueError("a pending dependency has not finished; nothing follows from it yet")
    if JobStatus(status) is not JobStatus.QUEUED or waiting_on <= 0:
        return DependentUpdate(DependentAction.LEAVE, waiting_on)
    if state.failed and DependencyPolicy(policy) is DependencyPolicy.CANCEL:
        return DependentUpdate(DependentAction.CANCEL, 0, dependency_failed_error(dependency_id, state))
    return DependentUpdate(DependentAction.COUNT_DOWN, waiting_on - 1)


def policies_cancelled_by(finished: DependencyState | str) -> tuple[DependencyPolicy, ...]:
    """The policies under which a waiting dependent is cancelled when a dependency finishes as
    `finished` (`on_dependency_finished` asked for each policy); for a store that decides in SQL."""
    return tuple(
        policy
        for policy in DependencyPolicy
        if on_dependency_finished(policy, finished, "", status=JobStatus.QUEUED, waiting_on=1).cancelled
    )


# -- limits ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LimitGroup:
    """The group a row counts in under one limit: the whole limit, or one partition of it."""

    limit: str
    """The limit's `GroupLimit.key` (``queue:NAME`` or ``job:NAME``)."""
    partitioned: bool
    """True for a partitioned limit: the group is one `limit_key`'s rows."""
    limit_key: str | None = None
    """The partition (None: the rows without a `limit_key`, one group of their own); always None
    when not partitioned."""


def group_of(limit: GroupLimit, *, queue: str, job_name: str, limit_key: str | None) -> LimitGroup | None:
    """The group a row (its `queue`, `job_name` and `limit_key`) counts in under `limit`, or None
    when the limit does not match the row.

    A queue limit matches the rows of queue `limit.name`, a job limit the rows of job name
    `limit.name`. Unpartitioned, every matching row is in one group whatever its `limit_key`;
    partitioned, each distinct `limit_key` is a group, the rows without one forming their own."""
    subject = queue if LimitScope(limit.scope) is LimitScope.QUEUE else job_name
    if subject != limit.name:
        return None
    if not limit.partitioned:
        return LimitGroup(limit.key, False)
    return LimitGroup(limit.key, True, limit_key)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def rate_period_us(rate_period: float) -> int:
    """`rate_period` seconds as whole microseconds (at least 1); a period core accepts is whole milliseconds."""
    period = float(rate_period)
    if not period > 0 or period == float("inf"):
        raise ValueError(f"a rate period must be a positive number of seconds, got {rate_period!r}")
    return max(1, round(period * 1_000_000))


def window_start_us(now_us: int, rate_period: float) -> int:
    """The start, in microseconds since the epoch, of the rate window `now_us` falls in: windows
    are `rate_period` seconds long, fixed, and aligned to the Unix epoch (exact integer arithmetic)."""
    period = rate_period_us(rate_period)
    return now_us // period * period


def epoch_us(moment: datetime) -> int:
    """An aware datetime as whole microseconds since the Unix epoch (exact, no float rounding)."""
    if moment.tzinfo is None:
        raise ValueError(f"a store's clock reading must be an aware datetime, got naive {moment!r}")
    return (moment - EPOCH) // _MICROSECOND


def window_start(now: datetime, rate_period: float) -> datetime:
    """The start of the rate window (`rate_period` seconds, aligned to the epoch) that `now` (an
    aware datetime, on the store's clock) falls in: ``start <= now < start + rate_period``, in UTC."""
    return EPOCH + timedelta(microseconds=window_start_us(epoch_us(now), rate_period))


__all__ = [
    "EPOCH",
    "FAILURES",
    "DependencyState",
    "DependentAction",
    "DependentUpdate",
    "InsertPlan",
    "LimitGroup",
    "dependency_failed_error",
    "epoch_us",
    "group_of",
    "on_dependency_finished",
    "plan_insert",
    "policies_cancelled_by",
    "rate_period_us",
    "state_of_row",
    "window_start",
    "window_start_us",
]
