"""soniq-redis certified by the generic contract suite (its class form)."""

from __future__ import annotations

import pytest

from soniq.params import PrepareWorkerParams
from soniq_contract_tests import BackendContractSuite, UrlBackendFactory
from soniq_contract_tests.harness import BackendFactory

# A pool limit far above what any contract test or worker process of the suite
# opens, so that prepare_worker has a shape it must refuse.
MAX_CONNECTIONS = 32


class TestRedisBackendContract(BackendContractSuite):
    @pytest.fixture
    def soniq_backend_factory(self, redis_url: str) -> BackendFactory:
        # The suite's own picklable factory: the claim test builds backends in other
        # processes, and the worker-process scenarios reuse its URL and options.
        return UrlBackendFactory(redis_url, {"max_connections": MAX_CONNECTIONS})

    @pytest.fixture
    def soniq_unservable_worker(self) -> PrepareWorkerParams:
        return PrepareWorkerParams(concurrency=MAX_CONNECTIONS, prefetch=0)
