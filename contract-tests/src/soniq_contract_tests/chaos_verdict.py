"""Moved to `soniq_contract_tests.chaos.verdict`; this name stays for existing imports."""

from __future__ import annotations

from soniq_contract_tests.chaos.verdict import MAX_ATTEMPTS, Fault, PlannedJob, Run, Verdict, judge, read_runs

__all__ = ["MAX_ATTEMPTS", "Fault", "PlannedJob", "Run", "Verdict", "judge", "read_runs"]
