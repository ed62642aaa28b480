"""soniq-redis certified by the generic contract suite (its class form)."""

from __future__ import annotations

import pytest

from soniq_contract_tests import BackendContractSuite, UrlBackendFactory
from soniq_contract_tests.harness import BackendFactory


class TestRedisBackendContract(BackendContractSuite):
    @pytest.fixture
    def soniq_backend_factory(self, redis_url: str) -> BackendFactory:
        # The suite's own picklable factory: the claim test builds backends in other processes.
        return UrlBackendFactory(redis_url)
