"""The generic backend contract suite, run through its class form against PostgreSQL."""

from __future__ import annotations

import pytest

from soniq_contract_tests.harness import BackendFactory, UrlBackendFactory
from soniq_contract_tests.suite import BackendContractSuite
from soniq_postgres import PostgresBackend


class TestPostgresContract(BackendContractSuite):
    @pytest.fixture
    def soniq_backend_factory(self, pg_url: str) -> BackendFactory:
        # Picklable, as the suite's multi-process claim test requires.
        return UrlBackendFactory(pg_url)


class TestPostgresContractPolling(BackendContractSuite):
    """The same contract with LISTEN off, as behind PgBouncer in transaction mode."""

    @pytest.fixture
    def soniq_backend_factory(self, pg_url: str) -> BackendFactory:
        return UrlBackendFactory(pg_url, {"listen": False})


def test_the_url_scheme_resolves_to_this_backend(pg_url: str) -> None:
    backend = UrlBackendFactory(pg_url)("ns_probe")
    assert isinstance(backend, PostgresBackend)
    assert backend.options.schema == "ns_probe"
