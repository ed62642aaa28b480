"""The dashboard refuses, when it is created, a backend without the roles its pages read."""

from __future__ import annotations

import dataclasses

import pytest

from soniq import BackendCapabilities, Soniq
from soniq.errors import MissingBackendRoleError
from soniq_dashboard.app import create_dashboard_app
from soniq_memory import MemoryBackend


class QueueStoreOnly(MemoryBackend):
    @property
    def capabilities(self) -> BackendCapabilities:
        return dataclasses.replace(super().capabilities, roles={"QueueStore": 1})


class WithoutDeadLetters(MemoryBackend):
    @property
    def capabilities(self) -> BackendCapabilities:
        roles = {name: version for name, version in super().capabilities.roles.items() if name != "DeadLetterStore"}
        return dataclasses.replace(super().capabilities, roles=roles)


@pytest.mark.parametrize(
    ("backend", "role"), [(QueueStoreOnly, "OperatorReads"), (WithoutDeadLetters, "DeadLetterStore")]
)
def test_the_dashboard_refuses_a_backend_without_the_roles_its_pages_read(
    backend: type[MemoryBackend], role: str
) -> None:
    with pytest.raises(MissingBackendRoleError) as caught:
        create_dashboard_app(Soniq("memory://", backend=backend()))
    assert caught.value.feature == "the dashboard"
    assert caught.value.role == role
    assert caught.value.backend.endswith(backend.__name__)
    assert backend.__name__ in str(caught.value)


def test_a_full_backend_gets_its_dashboard() -> None:
    assert create_dashboard_app(Soniq("memory://")) is not None
