"""A backend is checked against the roles it declares when the app is built."""

from __future__ import annotations

import pytest

from soniq import BackendCapabilities, BackendProtocolError, Soniq, SoniqError
from soniq.backend import ROLES
from soniq.backend.roles import MIGRATION_NOTE
from soniq_memory import MemoryBackend
from soniq_memory.backend import ROLES as MEMORY_ROLES


def backend_declaring(**capabilities: object) -> MemoryBackend:
    class Declaring(MemoryBackend):
        @property
        def capabilities(self) -> BackendCapabilities:
            return BackendCapabilities(**capabilities)  # type: ignore[arg-type]

    return Declaring()


def test_a_backend_written_for_the_single_protocol_4_is_refused_with_the_migration_note() -> None:
    with pytest.raises(BackendProtocolError) as caught:
        Soniq(backend=backend_declaring(protocol_version=4, roles={}))
    assert isinstance(caught.value, SoniqError)
    assert "single backend protocol 4" in str(caught.value)
    assert MIGRATION_NOTE in str(caught.value)


def test_a_backend_without_the_queue_store_role_is_refused() -> None:
    with pytest.raises(BackendProtocolError, match="does not declare the required role QueueStore"):
        Soniq(backend=backend_declaring(roles={"DeadLetterStore": 1}))


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_role_version_from_a_newer_core_asks_for_a_core_upgrade(role: str) -> None:
    roles = {**MEMORY_ROLES, role: ROLES[role].version + 1}
    with pytest.raises(BackendProtocolError, match=f"implements {role} v{ROLES[role].version + 1}.*upgrade soniq-core"):
        Soniq(backend=backend_declaring(roles=roles))


def test_a_role_version_older_than_core_asks_for_a_backend_upgrade() -> None:
    roles = {**MEMORY_ROLES, "QueueStore": 0}
    with pytest.raises(BackendProtocolError, match="upgrade the backend"):
        Soniq(backend=backend_declaring(roles=roles))


def test_a_declared_role_whose_methods_are_missing_is_refused_naming_them() -> None:
    class WithoutLeases(MemoryBackend):
        acquire_lease = None  # type: ignore[assignment]
        get_lease = None  # type: ignore[assignment]

    with pytest.raises(BackendProtocolError, match="declares ScheduleStore v1 but lacks acquire_lease, get_lease"):
        Soniq(backend=WithoutLeases())


def test_a_role_core_does_not_know_is_ignored() -> None:
    app = Soniq(backend=backend_declaring(roles={**MEMORY_ROLES, "TelepathyStore": 3}))
    assert "TelepathyStore" in app.backend.capabilities.roles


def test_every_role_lists_its_methods_and_the_core_role_stays_small() -> None:
    assert next(iter(ROLES)) == "QueueStore"
    assert len(ROLES["QueueStore"].methods()) <= 25
    every = [method for role in ROLES.values() for method in role.methods()]
    assert len(every) == len(set(every)), "a method belongs to exactly one role"
