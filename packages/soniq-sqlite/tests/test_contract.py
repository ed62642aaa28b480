"""The generic backend contract suite, in its class form, against a file per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from soniq_contract_tests.harness import BackendFactory, UrlBackendFactory
from soniq_contract_tests.suite import BackendContractSuite


class TestSQLiteBackendContract(BackendContractSuite):
    @pytest.fixture
    def soniq_backend_factory(self, tmp_path: Path) -> BackendFactory:
        # The URL form's factory pickles, which the suite's multi-process claim test needs.
        return UrlBackendFactory(f"sqlite:///{tmp_path}/contract.db")
