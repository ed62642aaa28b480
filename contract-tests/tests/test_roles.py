"""Roles: a test of a role the backend does not declare is skipped, naming it; a declared role's
tests run (and catch its bugs); the summary names the roles. Also the role table itself, and the
fixtures registry through which backends lend the suite their corrupt-row writer and transaction."""

from __future__ import annotations

import inspect

import pytest
from class_form import PROCESS_SCENARIOS, TRANSACTIONAL, run_class_form, run_class_form_output

from soniq.backend import ROLES
from soniq_contract_tests import BackendContractSuite
from soniq_contract_tests.backend_fixtures import (
    fixtures_for_class,
    register_contract_fixtures,
    unregister_contract_fixtures,
)
from soniq_contract_tests.selection import MODULE_ROLES, TEST_ROLES, roles_for_test
from soniq_contract_tests.suite.corrupt_rows import CORRUPT_ROW_WRITERS, corrupt_row_writer_for
from soniq_memory import MemoryBackend

OPTIONAL_ROLES = sorted(set(ROLES) - {"QueueStore"})


def _suite_tests() -> list[tuple[str, str]]:
    """(module, name) of every test of `BackendContractSuite`."""
    return [
        (member.__module__, name)
        for name, member in inspect.getmembers(BackendContractSuite, inspect.isfunction)
        if name.startswith("test_")
    ]


def test_every_suite_test_names_roles_this_soniq_core_knows() -> None:
    tests = _suite_tests()
    assert len(tests) > 200
    for module, name in tests:
        roles = roles_for_test(module, name)
        assert roles, f"{module}.{name} names no role"
        assert set(roles) <= set(ROLES), (name, roles)
    named = {name for _module, name in tests}
    assert set(TEST_ROLES) <= named, f"TEST_ROLES names tests the suite does not have: {set(TEST_ROLES) - named}"
    modules = {module.rsplit(".", 1)[1] for module, _name in tests}
    assert set(MODULE_ROLES) == modules, set(MODULE_ROLES) ^ modules
    # Every optional role has tests of its own.
    needed = {role for module, name in tests for role in roles_for_test(module, name) or ()}
    assert needed == set(ROLES)


def test_a_queue_store_only_backend_passes_with_every_optional_role_skipped(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "QueueStoreOnly")
    assert outcomes["failed"] == {}
    not_declared = {name: reason for name, reason in outcomes["skipped"].items() if "does not declare" in reason}
    for name, reason in not_declared.items():
        assert "QueueStoreOnly does not declare " in reason, (name, reason)
    for role in OPTIONAL_ROLES:
        assert any(f"does not declare {role}" in reason for reason in not_declared.values()), role
    # What is skipped for other reasons is what memory skips anyway (not shared, no transactions).
    assert set(outcomes["skipped"]) - set(not_declared) <= PROCESS_SCENARIOS | TRANSACTIONAL
    # Only the core role's tests ran, and they are most of the suite.
    for module, name in _suite_tests():
        if name in outcomes["passed"]:
            assert set(roles_for_test(module, name) or ()) == {"QueueStore"}, name
    assert len(outcomes["passed"]) >= 75
    for must_run in (
        "test_nack_preserves_attempts",
        "test_claim_is_exclusive_under_concurrent_claimers",
        "test_stale_recovery_requeues_only_stale_workers",
        "test_a_claim_returns_a_corrupt_row_with_decode_error_beside_the_good_ones",
        "test_delete_job_removes_a_row_in_any_status",
        "test_completion_stores_expires_at",
    ):
        assert must_run in outcomes["passed"], must_run


def test_the_summary_names_the_declared_roles_and_what_was_skipped(pytester: pytest.Pytester) -> None:
    result = run_class_form_output(pytester, "QueueStoreOnly", "-k", "nack or dead_letter or lease")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert "soniq contract suite: QueueStoreOnly roles: QueueStore v1" in result.stdout.lines
    (skipped,) = [line for line in result.stdout.lines if "QueueStoreOnly skipped as not declared:" in line]
    assert "DeadLetterStore (" in skipped
    assert "ScheduleStore (" in skipped
    assert "QueueStoreOnly does not declare DeadLetterStore" in result.stdout.str()
    full = run_class_form_output(pytester, "MemoryBackend", "-k", "nack")
    assert any(
        line.startswith("soniq contract suite: MemoryBackend roles: QueueStore v1, DeadLetterStore v1")
        for line in full.stdout.lines
    )
    assert "soniq contract suite: MemoryBackend skipped as not declared: none" in full.stdout.lines


def test_a_declared_role_that_is_broken_fails_and_undeclared_ones_are_still_skipped(
    pytester: pytest.Pytester,
) -> None:
    outcomes = run_class_form(pytester, "DeclaresDeadLettersButReplayForgets", "-k", "replay or lease or prune")
    assert {
        "test_replay_creates_a_fresh_queued_row_with_a_new_id",
        "test_replay_twice_counts_two_resurrections",
    } <= set(outcomes["failed"])
    assert "test_replay_of_a_missing_dead_letter_returns_none" in outcomes["passed"]
    lease_and_prune = set(outcomes["skipped"]) - PROCESS_SCENARIOS
    assert lease_and_prune
    for name in lease_and_prune:
        assert "DeclaresDeadLettersButReplayForgets does not declare" in outcomes["skipped"][name]


def test_a_role_mark_on_a_test_replaces_its_modules_roles() -> None:
    module = "soniq_contract_tests.suite.nack"
    assert roles_for_test(module, "test_nack_is_idempotent") == ("QueueStore",)
    assert roles_for_test(module, "test_nack_is_idempotent", ("OperatorReads",)) == ("OperatorReads",)
    assert roles_for_test("tests_of_my_backend", "test_mine") is None  # a subclass's own test: not gated
    with pytest.raises(LookupError, match="MODULE_ROLES"):
        roles_for_test("soniq_contract_tests.suite.brand_new", "test_x")


# -- the fixtures registry ----------------------------------------------------------------------


def test_memory_registers_its_corrupt_row_writer_through_its_entry_point() -> None:
    registration = fixtures_for_class(MemoryBackend)
    assert registration is not None
    assert "entry point" in registration.source
    assert "soniq_memory.contract_fixtures" in registration.source
    assert registration.corrupt_row is not None
    assert registration.transaction is None

    class Subclass(MemoryBackend):
        pass

    assert fixtures_for_class(Subclass) == registration  # a subclass is served by its base's registration
    assert corrupt_row_writer_for(Subclass) is registration.corrupt_row
    assert "memory" in CORRUPT_ROW_WRITERS  # the chaos runs look writers up by scheme


def test_an_in_process_registration_comes_first_and_a_string_names_the_class_without_importing_it() -> None:
    async def writer(backend: object, job_id: str, raw_args: str) -> None: ...

    registration = register_contract_fixtures("soniq_memory.backend:MemoryBackend", corrupt_row=writer)
    try:
        assert fixtures_for_class(MemoryBackend) is registration
        assert corrupt_row_writer_for(MemoryBackend) is writer
    finally:
        unregister_contract_fixtures(registration)
    assert fixtures_for_class(MemoryBackend) is not registration


def test_a_class_nobody_registers_has_no_fixtures() -> None:
    class Unknown:
        pass

    assert fixtures_for_class(Unknown) is None
    assert corrupt_row_writer_for(Unknown) is None
