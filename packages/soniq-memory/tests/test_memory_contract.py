"""The memory backend passes the whole contract suite (class form)."""

from __future__ import annotations

import pytest

from soniq_contract_tests import BackendContractSuite, BackendFactory
from soniq_memory import MemoryBackend


def fresh_store(namespace: str) -> MemoryBackend:
    return MemoryBackend(namespace=namespace)


def named_store(namespace: str) -> MemoryBackend:
    return MemoryBackend.from_url("memory://contract", namespace=namespace)


class TestMemoryContract(BackendContractSuite):
    @pytest.fixture
    def soniq_backend_factory(self) -> BackendFactory:
        return fresh_store


class TestNamedMemoryContract(BackendContractSuite):
    """``memory://NAME``: one process-wide store per (name, namespace)."""

    @pytest.fixture
    def soniq_backend_factory(self) -> BackendFactory:
        return named_store
