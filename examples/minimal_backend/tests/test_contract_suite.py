"""(b) The contract suite: every core-role test passes, every optional role's tests are skipped as
not declared, and the summary says so. Run in both forms, each in a pytest session of its own."""

from __future__ import annotations

import re

import pytest

OPTIONAL_ROLES = (
    "CancelChannel",
    "DeadLetterStore",
    "DependencyStore",
    "LimitStore",
    "OperatorReads",
    "RetentionStore",
    "ScheduleStore",
    "SchemaAdmin",
)

CORE_TESTS = (
    "test_nack_preserves_attempts",
    "test_claim_is_exclusive_under_concurrent_claimers",
    "test_stale_recovery_requeues_only_stale_workers",
    "test_fenced_write_on_a_missing_row_returns_false",
    "test_a_claim_returns_a_corrupt_row_with_decode_error_beside_the_good_ones",
    "test_a_scheduled_job_holds_its_key",
    "test_wait_for_jobs_wakes_on_an_enqueue",
    "test_delete_job_removes_a_row_in_any_status",
)

CLASS_FORM = """
import pytest
from soniq_contract_tests import BackendContractSuite, BackendFactory
from soniq_minimal import MinimalBackend


def build(namespace: str) -> MinimalBackend:
    return MinimalBackend(namespace=namespace)


class TestMinimalContract(BackendContractSuite):
    @pytest.fixture
    def soniq_backend_factory(self) -> BackendFactory:
        return build
"""


def _outcomes(lines: list[str]) -> dict[str, set[str]]:
    """Test name -> its outcomes (several for a parametrized test), from ``-v`` output."""
    found: dict[str, set[str]] = {}
    for line in lines:
        match = re.match(r"\S+::(test_\w+)(\[[^\]]*\])? (PASSED|SKIPPED|FAILED|ERROR)", line)
        if match:
            found.setdefault(match.group(1), set()).add(match.group(3))
    return found


def _check(result: pytest.RunResult) -> None:
    text = result.stdout.str()
    outcomes = _outcomes(result.stdout.lines)
    assert result.ret == 0, text[-4000:]
    assert not [name for name, seen in outcomes.items() if seen & {"FAILED", "ERROR"}]
    for name in CORE_TESTS:
        assert outcomes.get(name) == {"PASSED"}, (name, outcomes.get(name))
    assert sum(seen == {"PASSED"} for seen in outcomes.values()) >= 80
    assert "soniq contract suite: MinimalBackend roles: QueueStore v1" in result.stdout.lines
    (skipped_line,) = [line for line in result.stdout.lines if "MinimalBackend skipped as not declared:" in line]
    for role in OPTIONAL_ROLES:
        assert re.search(rf"\b{role} \(\d+ tests?\)", skipped_line), (role, skipped_line)
        assert f"MinimalBackend does not declare {role}" in text, role


def test_url_form_passes_the_core_role_and_skips_every_optional_one(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", "-rs", "--pyargs", "soniq_contract_tests", "--soniq-url", "minimal://"
    )
    _check(result)


def test_class_form_passes_the_core_role_and_skips_every_optional_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_minimal_contract=CLASS_FORM)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", "-rs")
    _check(result)
