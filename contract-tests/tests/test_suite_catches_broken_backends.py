"""The suite passes against the memory backend and fails against each deliberately broken one."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent

CLASS_FORM = """
import pytest
from soniq_contract_tests import BackendContractSuite
from broken_backends import *  # noqa: F403
from soniq_memory import MemoryBackend


def build(namespace):
    return {backend}(namespace=namespace)


class TestUnderTest(BackendContractSuite):
{knobs}

    @pytest.fixture
    def soniq_backend_factory(self):
        return build
"""


def _test_name(nodeid: str) -> str:
    return nodeid.split("::")[-1].split("[")[0]


# Broken backends are expected to fail: give up on a silent worker sooner than the default.
FAST_KNOBS = "    heartbeat_timeout = 0.3\n    stale_deadline = 1.0"


def run_class_form(pytester: pytest.Pytester, backend: str, *args: str, fast: bool = True) -> dict[str, set[str]]:
    """Run the suite's class form against `backend`; the test names by outcome."""
    pytester.syspathinsert(HERE)
    # A neutral module name: `-k nack` must not match every test through the file name.
    source = CLASS_FORM.format(backend=backend, knobs=FAST_KNOBS if fast else "    pass")
    pytester.makepyfile(test_backend_under_test=source)
    if "no:asyncio" not in args:
        pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    recorder = pytester.inline_run("-p", "no:cacheprovider", *args)
    passed, skipped, failed = recorder.listoutcomes()
    return {
        "passed": {_test_name(report.nodeid) for report in passed},
        "skipped": {_test_name(report.nodeid) for report in skipped},
        "failed": {_test_name(report.nodeid) for report in failed},
    }


def test_suite_passes_against_memory_with_no_skips(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "MemoryBackend", fast=False)
    assert outcomes["failed"] == set()
    assert outcomes["skipped"] == set()
    assert len(outcomes["passed"]) >= 70
    for must_run in (
        "test_nack_preserves_attempts",
        "test_stale_recovery_never_touches_live_workers_rows",
        "test_claim_is_exclusive_under_concurrent_claimers",
        "test_fenced_write_by_a_non_owner_writes_nothing",
        "test_queue_stats_counts_each_status_and_the_total_adds_up",
    ):
        assert must_run in outcomes["passed"]


def test_suite_catches_a_nack_that_does_nothing(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "NackDoesNothing", "-k", "nack")
    assert {
        "test_nack_requeues_with_the_seed_field_set",
        "test_nack_is_idempotent",
        "test_nacked_row_is_claimable_again_at_once",
    } <= outcomes["failed"]


def test_suite_catches_a_nack_that_touches_attempts(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "NackCountsAnAttempt", "-k", "nack")
    assert {"test_nack_preserves_attempts", "test_nack_leaves_every_other_field_alone"} <= outcomes["failed"]
    assert {"test_nack_preserves_last_error", "test_nack_requeues_with_the_seed_field_set"} <= outcomes["passed"]


def test_suite_catches_a_stale_recovery_that_does_nothing(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "RecoveryDoesNothing", "-k", "stale_recovery or recovered")
    assert {
        "test_stale_recovery_requeues_only_stale_workers",
        "test_stale_recovery_marks_the_stale_worker_stopped",
        "test_stale_recovery_counts_an_attempt_for_a_started_row",
        "test_stale_recovery_does_not_count_an_attempt_for_an_unstarted_row",
        "test_stale_recovery_dead_letters_started_row_as_zombie_under_dead_letter_policy",
        "test_stale_recovery_never_dead_letters_an_unstarted_row",
        "test_stale_recovery_dead_letters_at_max_attempts_as_worker_lost",
        "test_stale_recovery_requeues_rows_of_an_unregistered_worker",
        "test_worker_whose_row_was_recovered_and_reclaimed_cannot_overwrite_it",
    } <= outcomes["failed"]


def test_suite_catches_a_recovery_that_takes_live_workers_rows(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "RecoveryTakesLiveWorkersRows", "-k", "stale_recovery")
    assert "test_stale_recovery_never_touches_live_workers_rows" in outcomes["failed"]
    assert "test_stale_recovery_counts_an_attempt_for_a_started_row" in outcomes["passed"]


def test_suite_catches_a_claim_that_hands_a_row_to_two_claimers(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "ClaimHandsRowsOutTwice", "-k", "claim")
    assert "test_claim_is_exclusive_under_concurrent_claimers" in outcomes["failed"]
    assert "test_claim_honours_the_limit" in outcomes["passed"]


def test_suite_needs_no_pytest_asyncio(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "MemoryBackend", "-p", "no:asyncio", "-k", "nack or claim")
    assert outcomes["failed"] == set()
    assert "test_nack_preserves_attempts" in outcomes["passed"]
