"""The memory backend passes the whole contract suite (class form)."""

from __future__ import annotations

import pytest

from soniq.backend import Backend
from soniq_contract_tests import BackendContractSuite, BackendFactory, CorruptRowWriter
from soniq_memory import MemoryBackend


def fresh_store(namespace: str) -> MemoryBackend:
    return MemoryBackend(namespace=namespace)


def named_store(namespace: str) -> MemoryBackend:
    return MemoryBackend.from_url("memory://contract", namespace=namespace)


async def corrupt_row(backend: Backend, job_id: str, raw_args: str) -> None:
    assert isinstance(backend, MemoryBackend)
    backend.put_raw_args(job_id, raw_args)


class TestMemoryContract(BackendContractSuite):
    @pytest.fixture
    def soniq_backend_factory(self) -> BackendFactory:
        return fresh_store

    @pytest.fixture
    def soniq_corrupt_row(self) -> CorruptRowWriter:
        return corrupt_row


class TestNamedMemoryContract(BackendContractSuite):
    """``memory://NAME``: one process-wide store per (name, namespace)."""

    @pytest.fixture
    def soniq_backend_factory(self) -> BackendFactory:
        return named_store

    @pytest.fixture
    def soniq_corrupt_row(self) -> CorruptRowWriter:
        return corrupt_row
