"""The worker's shutdown states, the transitions the seed contract allows, and a run's phases."""

from __future__ import annotations

import enum

from soniq.errors import InternalError


class WorkerState(str, enum.Enum):
    """Exactly the states of the shutdown contract's diagram."""

    RUNNING = "RUNNING"
    DRAINING = "DRAINING"
    FORCE_TIMEOUT_PATH = "FORCE_TIMEOUT_PATH"
    WAIT_FOR_THREAD = "WAIT_FOR_THREAD"
    STOPPED = "STOPPED"


ALLOWED_TRANSITIONS: dict[WorkerState, frozenset[WorkerState]] = {
    WorkerState.RUNNING: frozenset({WorkerState.DRAINING}),
    WorkerState.DRAINING: frozenset({WorkerState.STOPPED, WorkerState.FORCE_TIMEOUT_PATH}),
    WorkerState.FORCE_TIMEOUT_PATH: frozenset({WorkerState.STOPPED, WorkerState.WAIT_FOR_THREAD}),
    WorkerState.WAIT_FOR_THREAD: frozenset({WorkerState.STOPPED}),
    WorkerState.STOPPED: frozenset(),
}


class IllegalTransitionError(InternalError, RuntimeError):
    """A transition the diagram does not have; always a bug in the worker."""


def check_transition(current: WorkerState, target: WorkerState) -> None:
    if target not in ALLOWED_TRANSITIONS[current]:
        raise IllegalTransitionError(f"{current.value} -> {target.value} is not in the shutdown diagram")


class RunPhase(enum.Enum):
    """Where a claimed row is in its life on this worker; what `Worker.phase_of` returns."""

    BUFFERED = "buffered"
    """Claimed ahead of a free slot (prefetch); no user code has run."""
    CLAIMED = "claimed"
    """Has a slot; the handler has not been called yet."""
    WAITING_PERMIT = "waiting_permit"
    """A sync job waiting for a thread-pool permit: still async-cancellable."""
    RUNNING_ASYNC = "running_async"
    RUNNING_SYNC = "running_sync"
    """A thread runs the handler; it cannot be cancelled."""
    SETTLING = "settling"
    """The outcome is being written; never interrupted."""
    FINISHED = "finished"
