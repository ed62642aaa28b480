"""soniq-contract-tests: the pytest suite every Soniq backend must pass.

Import `BackendContractSuite` (the class form) and `UrlBackendFactory` from
here. This package is also a pytest plugin loaded in every session, so names
are resolved lazily: importing it imports neither soniq nor the tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"
__all__ = ["BackendContractSuite", "BackendFactory", "ContractHarness", "UrlBackendFactory"]

if TYPE_CHECKING:
    from soniq_contract_tests.harness import BackendFactory, ContractHarness, UrlBackendFactory
    from soniq_contract_tests.suite import BackendContractSuite


def __getattr__(name: str) -> Any:
    if name == "BackendContractSuite":
        from soniq_contract_tests.suite import BackendContractSuite

        return BackendContractSuite
    if name in ("BackendFactory", "ContractHarness", "UrlBackendFactory"):
        from soniq_contract_tests import harness

        return getattr(harness, name)
    raise AttributeError(f"module 'soniq_contract_tests' has no attribute {name!r}")
