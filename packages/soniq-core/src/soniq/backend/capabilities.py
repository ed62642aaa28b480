"""What a backend says about itself: the roles it fills and what it can do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta


def _only_the_core_role() -> Mapping[str, int]:
    return {"QueueStore": 1}


@dataclass(frozen=True, slots=True)
class BackendCapabilities:
    """What a backend can do; core branches on these, never on the backend's type."""

    roles: Mapping[str, int] = field(default_factory=_only_the_core_role)
    """The roles this backend fills, each with the version of it that the backend implements,
    e.g. ``{"QueueStore": 1, "DeadLetterStore": 1}``. `QueueStore` is required."""
    push_wakeup: bool = False
    """`wait_for_jobs` returns promptly when another process enqueues."""
    transactional_enqueue: bool = False
    """`enqueue_jobs` with `connection` joins the caller's open transaction."""
    shared_across_processes: bool = True
    """Several worker processes may share the store (False for in-process memory)."""
    timestamp_precision: timedelta = timedelta(microseconds=1)
    push_job_changes: bool = False
    """`CancelChannel.wait_for_job_changes` returns promptly when another process finishes a
    watched job or requests a cancel; without it core polls, once per process."""
    protocol_version: int | None = None
    """Only set by backends written for the single protocol of soniq-core 0.2 (versions 1 to 4);
    core refuses them with a pointer to the migration note. Leave it None."""

    def role_version(self, role: str) -> int | None:
        """The version of `role` this backend declares, or None when it does not fill it."""
        return self.roles.get(role)

    def describe_roles(self) -> str:
        """``QueueStore v1, DeadLetterStore v1``: the roles as the contract suite's summary prints them."""
        return ", ".join(f"{name} v{version}" for name, version in self.roles.items())
