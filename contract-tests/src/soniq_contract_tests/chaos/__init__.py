"""The chaos machinery: real worker processes under faults, then a verdict on every job.

Not part of the contract suite (nothing here is collected by ``--pyargs
soniq_contract_tests``); backends call it from their own marked tests:
`run_chaos(ChaosConfig(...))` in `driver`, bad-input checks and a loopback
`TcpProxy` in `scenarios`, the judge in `verdict`, and the poisoned-job run
`run_poisoned(PoisonConfig(...))` in `poisoned`.
"""

from __future__ import annotations

from soniq_contract_tests.chaos.driver import run_chaos
from soniq_contract_tests.chaos.poisoned import PoisonConfig, PoisonReport, run_poisoned
from soniq_contract_tests.chaos.report import ChaosConfig, ChaosReport

__all__ = ["ChaosConfig", "ChaosReport", "PoisonConfig", "PoisonReport", "run_chaos", "run_poisoned"]
