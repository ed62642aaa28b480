"""soniq-contract-tests: the pytest suite every Soniq backend must pass.

Import `BackendContractSuite` (the class form, from `suite/`),
`UrlBackendFactory` and the fixture types from here. The pytest plugin loads
this package in every session, so names are resolved lazily: importing it
imports neither soniq nor the tests.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"
__all__ = [
    "BackendContractSuite",
    "BackendFactory",
    "ContractHarness",
    "CorruptRowWriter",
    "TransactionFactory",
    "UrlBackendFactory",
]

if TYPE_CHECKING:
    from soniq_contract_tests.harness import BackendFactory, ContractHarness, UrlBackendFactory
    from soniq_contract_tests.suite import BackendContractSuite, CorruptRowWriter, TransactionFactory


def __getattr__(name: str) -> Any:
    # Through sys.modules, not this package's attributes: pytester runs restore
    # sys.modules between sessions and leave stale submodule attributes behind.
    if name in ("BackendContractSuite", "CorruptRowWriter", "TransactionFactory"):
        return getattr(importlib.import_module("soniq_contract_tests.suite"), name)
    if name in ("BackendFactory", "ContractHarness", "UrlBackendFactory"):
        return getattr(importlib.import_module("soniq_contract_tests.harness"), name)
    raise AttributeError(f"module 'soniq_contract_tests' has no attribute {name!r}")
