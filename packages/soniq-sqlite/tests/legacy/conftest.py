"""The 0.1.0 upgrade tests' fixtures: the 0.1.0 virtualenv comes from
`soniq_contract_tests.legacy_venv`."""

from __future__ import annotations

from soniq_contract_tests.legacy_venv import legacy_python

__all__ = ["legacy_python"]
