"""The suite passes against the memory backend and fails against each deliberately broken one."""

from __future__ import annotations

import pytest
from class_form import PROCESS_SCENARIOS, TRANSACTIONAL, WITH_TRANSACTION, run_class_form


def test_suite_passes_against_memory_skipping_only_what_does_not_apply(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "MemoryBackend", fast=False)
    assert outcomes["failed"] == {}
    assert set(outcomes["skipped"]) == PROCESS_SCENARIOS | TRANSACTIONAL
    for name in PROCESS_SCENARIOS:
        assert "shared_across_processes is False" in outcomes["skipped"][name]
    for name in TRANSACTIONAL:
        assert "transactional_enqueue is False" in outcomes["skipped"][name]
    assert len(outcomes["passed"]) >= 80
    for must_run in (
        "test_nack_preserves_attempts",
        "test_stale_recovery_never_touches_live_workers_rows",
        "test_find_stale_jobs_marks_the_stale_worker_stopped_and_returns_its_rows_as_read",
        "test_rescue_jobs_writes_exactly_the_given_rescue",
        "test_rescue_jobs_leaves_alone_a_row_that_changed_since_it_was_read",
        "test_claim_is_exclusive_under_concurrent_claimers",
        "test_fenced_write_by_a_non_owner_writes_nothing",
        "test_queue_stats_counts_each_status_and_the_total_adds_up",
        "test_prepare_worker_accepts_a_sane_concurrency_and_prefetch",
        "test_prepare_worker_refuses_what_it_cannot_serve_with_a_soniq_error",
        "test_claim_by_job_names_takes_only_those_names_in_priority_order",
        "test_expire_unknown_jobs_moves_queued_rows_of_unknown_names",
        "test_job_page_leaves_results_out_unless_asked",
        "test_a_claim_returns_a_corrupt_row_with_decode_error_beside_the_good_ones",
        "test_dead_letter_listing_and_get_show_a_corrupt_row",
        "test_each_due_time_fires_exactly_once_among_concurrent_firers",
        "test_exactly_one_of_many_concurrent_acquirers_wins",
        "test_prune_deletes_only_finished_rows_past_expires_at",
        # protocol 4 (issue 19): memory passes every one, none skipped
        "test_fan_in_becomes_claimable_only_after_the_last_dependency",
        "test_concurrent_limited_claimers_never_exceed_max_concurrent",
        "test_rate_limit_allows_n_claims_per_window",
        "test_request_cancel_of_a_processing_row_only_sets_the_flag",
        "test_a_cancel_request_wakes_the_waiter_without_a_watch",
    ):
        assert must_run in outcomes["passed"]


def test_suite_catches_a_nack_that_does_nothing(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "NackDoesNothing", "-k", "nack")
    assert {
        "test_nack_requeues_with_the_seed_field_set",
        "test_nack_is_idempotent",
        "test_nacked_row_is_claimable_again_at_once",
    } <= set(outcomes["failed"])


def test_suite_catches_a_nack_that_touches_attempts(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "NackCountsAnAttempt", "-k", "nack")
    assert {"test_nack_preserves_attempts", "test_nack_leaves_every_other_field_alone"} <= set(outcomes["failed"])
    assert {"test_nack_preserves_last_error", "test_nack_requeues_with_the_seed_field_set"} <= set(outcomes["passed"])


def test_suite_catches_a_stale_recovery_that_does_nothing(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "RecoveryDoesNothing", "-k", "stale or rescue or recovered")
    assert {
        "test_find_stale_jobs_marks_the_stale_worker_stopped_and_returns_its_rows_as_read",
        "test_find_stale_jobs_returns_old_rows_of_a_worker_id_with_no_row_or_a_stopped_row",
        "test_stale_recovery_requeues_only_stale_workers",
        "test_stale_recovery_marks_the_stale_worker_stopped",
        "test_stale_recovery_counts_an_attempt_for_a_started_row",
        "test_stale_recovery_does_not_count_an_attempt_for_an_unstarted_row",
        "test_stale_recovery_dead_letters_started_row_as_zombie_under_dead_letter_policy",
        "test_stale_recovery_never_dead_letters_an_unstarted_row",
        "test_stale_recovery_dead_letters_at_max_attempts_as_worker_lost",
        "test_stale_recovery_requeues_rows_of_an_unregistered_worker",
        "test_worker_whose_row_was_recovered_and_reclaimed_cannot_overwrite_it",
    } <= set(outcomes["failed"])


def test_suite_catches_a_recovery_that_takes_live_workers_rows(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "RecoveryTakesLiveWorkersRows", "-k", "stale")
    assert {
        "test_stale_recovery_never_touches_live_workers_rows",
        "test_find_stale_jobs_never_returns_a_live_workers_rows",
    } <= set(outcomes["failed"])
    assert "test_stale_recovery_counts_an_attempt_for_a_started_row" in outcomes["passed"]


def test_suite_catches_a_backend_that_decides_its_own_recovery(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "RescueDecidesItself", "-k", "stale or rescue")
    assert {
        "test_rescue_jobs_writes_exactly_the_given_rescue",
        "test_stale_recovery_does_not_count_an_attempt_for_an_unstarted_row",
        "test_stale_recovery_never_dead_letters_an_unstarted_row",
        "test_stale_recovery_counts_an_attempt_for_a_started_row",
    } <= set(outcomes["failed"])
    # Finding is not its bug: those contracts still pass.
    assert "test_find_stale_jobs_marks_the_stale_worker_stopped_and_returns_its_rows_as_read" in outcomes["passed"]


def test_suite_catches_a_claim_that_hands_a_row_to_two_claimers(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "ClaimHandsRowsOutTwice", "-k", "claim")
    assert "test_claim_is_exclusive_under_concurrent_claimers" in outcomes["failed"]
    assert "test_claim_honours_the_limit" in outcomes["passed"]


def test_suite_catches_a_claim_that_ignores_job_names(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "ClaimIgnoresJobNames", "-k", "job_names")
    assert {
        "test_claim_by_job_names_takes_only_those_names_in_priority_order",
        "test_claim_by_job_names_with_a_queues_filter_honours_both",
        "test_claim_by_job_names_spends_no_attempt_of_other_names",
        "test_claim_with_no_job_names_claims_nothing",
    } <= set(outcomes["failed"])
    assert {"test_claim_without_job_names_takes_every_name", "test_worker_job_names_round_trip"} <= set(
        outcomes["passed"]
    )


def test_suite_catches_a_backend_that_raises_on_a_corrupt_row(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "RaisesOnCorruptRow", "-k", "corrupt")
    corrupt_tests = {
        "test_a_claim_returns_a_corrupt_row_with_decode_error_beside_the_good_ones",
        "test_listings_and_get_job_show_a_corrupt_row",
        "test_dead_letter_listing_and_get_show_a_corrupt_row",
    }
    assert set(outcomes["failed"]) == corrupt_tests
    assert "cannot decode args" in outcomes["failed"][min(corrupt_tests)]


def test_corrupt_row_contract_skips_naming_the_fixture_when_none_is_given(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "MemoryBackend", "-k", "corrupt", corrupt_row="None")
    assert outcomes["failed"] == {}
    assert outcomes["passed"] == {}
    assert len(outcomes["skipped"]) == 3
    for reason in outcomes["skipped"].values():
        assert "override the fixture soniq_corrupt_row" in reason


def test_transactional_enqueue_contract_passes_a_backend_that_joins_the_callers_transaction(
    pytester: pytest.Pytester,
) -> None:
    outcomes = run_class_form(pytester, "TransactionalMemory", "-k", "transactional", extra=WITH_TRANSACTION)
    assert set(outcomes["passed"]) == TRANSACTIONAL
    assert outcomes["failed"] == outcomes["skipped"] == {}


def test_suite_catches_a_backend_that_commits_outside_the_callers_transaction(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "EnqueuesOutsideTheTransaction", "-k", "transactional", extra=WITH_TRANSACTION)
    assert set(outcomes["failed"]) == TRANSACTIONAL
    assert "visible outside the caller's open transaction" in outcomes["failed"][min(TRANSACTIONAL)]


def test_a_transactional_backend_without_a_transaction_fixture_fails_naming_it(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "TransactionalMemory", "-k", "transactional")
    assert set(outcomes["failed"]) == TRANSACTIONAL
    for message in outcomes["failed"].values():
        assert "override the fixture soniq_transaction" in message


def test_suite_needs_no_pytest_asyncio(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "MemoryBackend", "-p", "no:asyncio", "-k", "nack or claim")
    assert outcomes["failed"] == {}
    assert "test_nack_preserves_attempts" in outcomes["passed"]


# -- schedules, leader lease, pruning (issue 14) ---------------------------------


def test_suite_catches_a_fire_that_ignores_the_fence(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "FireIgnoresTheFence", "-k", "fire")
    assert {
        "test_a_stale_expected_next_run_fires_nothing",
        "test_each_due_time_fires_exactly_once_among_concurrent_firers",
        "test_a_paused_or_removed_schedule_fires_nothing",
    } <= set(outcomes["failed"])
    assert "test_fire_without_jobs_only_advances" in outcomes["passed"]


def test_suite_catches_a_lease_that_ignores_its_holder(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "LeaseIgnoresTheHolder", "-k", "lease or acquir or takeover")
    assert {
        "test_another_holder_cannot_take_an_unexpired_lease",
        "test_exactly_one_of_many_concurrent_acquirers_wins",
    } <= set(outcomes["failed"])
    assert "test_a_free_lease_is_acquired_for_ttl_seconds" in outcomes["passed"]


def test_suite_catches_a_prune_that_ignores_expiry(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "PruneIgnoresExpiry", "-k", "prune")
    assert {
        "test_prune_deletes_only_finished_rows_past_expires_at",
        "test_prune_judges_expiry_by_the_given_now",
    } <= set(outcomes["failed"])
    assert "test_prune_respects_the_limit" in outcomes["passed"]


# -- protocol 4 (issue 19) ---------------------------------------------------------


def test_suite_catches_a_claim_that_ignores_limits(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(
        pytester, "ClaimIgnoresLimits", "-k", "limit or rate or slot or group or claimers or max_concurrent"
    )
    assert {
        "test_max_concurrent_per_job_name_counts_across_workers",
        "test_max_concurrent_per_queue_counts_across_workers",
        "test_partitioned_limits_give_each_limit_key_its_own_slots",
        "test_a_full_group_is_passed_over_for_the_rows_behind_it",
        "test_rate_limit_allows_n_claims_per_window",
        "test_concurrent_limited_claimers_never_exceed_max_concurrent",
    } <= set(outcomes["failed"])
    assert "test_a_limit_on_another_group_does_not_hold_a_row_back" in outcomes["passed"]


def test_suite_catches_a_limit_checked_outside_the_claim(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "LimitCheckedBeforeTheClaim", "-k", "max_concurrent")
    assert "test_concurrent_limited_claimers_never_exceed_max_concurrent" in outcomes["failed"]
    assert "test_max_concurrent_per_job_name_counts_across_workers" in outcomes["passed"]


def test_suite_catches_an_enqueue_that_ignores_dependencies(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "EnqueueIgnoresDependencies", "-k", "depend or fan_in or retries")
    assert {
        "test_a_job_waiting_on_a_queued_dependency_is_not_claimed",
        "test_fan_in_becomes_claimable_only_after_the_last_dependency",
        "test_retries_snoozes_nacks_and_requeues_resolve_nothing",
        "test_a_failed_dependency_cancels_its_dependents_and_theirs",
    } <= set(outcomes["failed"])


def test_suite_catches_a_cancel_that_ends_running_rows_at_once(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "CancelEndsRunningRows", "-k", "cancel or flag")
    assert {
        "test_request_cancel_of_a_processing_row_only_sets_the_flag",
        "test_finish_cancel_writes_cancelled_and_keeps_attempts",
        "test_the_flag_survives_a_nack_and_a_retry_and_comes_back_with_the_claim",
    } <= set(outcomes["failed"])
    assert "test_request_cancel_of_a_queued_row_cancels_it" in outcomes["passed"]


def test_suite_catches_a_push_that_never_wakes(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "PushThatNeverWakes", "-k", "woken or wakes")
    assert {
        "test_a_watched_job_finished_elsewhere_wakes_the_waiter",
        "test_a_cancel_request_wakes_the_waiter_without_a_watch",
        "test_concurrent_waiters_on_one_instance_are_each_woken",
    } <= set(outcomes["failed"])
    assert "test_wait_for_job_changes_returns_by_its_timeout" not in outcomes["failed"]


def test_suite_catches_a_backend_that_decides_the_dependency_cascade_itself(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "CascadeDecidesItself", "-k", "depend or plan_insert")
    assert {
        "test_a_waiting_dependent_changes_as_cores_on_dependency_finished_says",
        "test_a_failed_dependency_cancels_its_dependents_and_theirs",
        "test_a_cancelled_dependent_fails_its_own_dependents",
    } <= set(outcomes["failed"])
    assert "parent job" in outcomes["failed"]["test_a_waiting_dependent_changes_as_cores_on_dependency_finished_says"]
    # Rows planned at enqueue follow core's rule in it, and so does counting down: those pass.
    assert "test_a_new_row_is_stored_as_cores_plan_insert_says" not in outcomes["failed"]
    assert {
        "test_a_new_row_is_stored_as_cores_plan_insert_says",
        "test_completing_the_dependency_makes_the_dependent_claimable",
        "test_a_failed_dependency_counts_as_resolved_under_policy_run",
    } <= set(outcomes["passed"])


def test_the_cascade_test_fails_only_where_the_cascade_differs_from_cores(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "CascadeDecidesItself", "-k", "on_dependency_finished and (done or run)")
    assert outcomes["failed"] == {}
    assert set(outcomes["passed"]) == {"test_a_waiting_dependent_changes_as_cores_on_dependency_finished_says"}


# -- round three: queue pauses, steps, versions, shutdown nacks --------------------------------


def test_suite_catches_a_claim_that_ignores_paused_queues(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "ClaimIgnoresExcludedQueues", "-k", "excluded or pause")
    assert {
        "test_claim_leaves_excluded_queues_untouched_and_claims_the_rest",
        "test_a_claim_of_only_excluded_queues_claims_nothing",
        "test_an_excluded_queue_is_claimed_again_once_no_longer_excluded",
        "test_a_limited_claim_leaves_excluded_queues_untouched",
        "test_max_versions_and_excluded_queues_together",
    } <= set(outcomes["failed"])
    assert "test_pause_and_resume_say_whether_they_changed_anything" in outcomes["passed"]


def test_suite_catches_a_claim_that_touches_paused_rows(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "ClaimTouchesExcludedRows", "-k", "excluded")
    assert {
        "test_claim_leaves_excluded_queues_untouched_and_claims_the_rest",
        "test_a_claim_of_only_excluded_queues_claims_nothing",
    } <= set(outcomes["failed"])


def test_suite_catches_unfenced_step_writes(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(
        pytester, "StepWritesUnfenced", "-k", "step or checkpoint or another_worker or not_processing or last_run"
    )
    assert {
        "test_another_worker_writes_nothing",
        "test_a_row_that_is_not_processing_is_not_written",
        "test_the_claim_and_get_job_return_what_the_last_run_stored",
    } <= set(outcomes["failed"])
    assert "test_save_step_adds_a_key_and_keeps_the_others" in outcomes["passed"]


def test_suite_catches_a_step_write_that_drops_the_other_steps(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "StepReplacesEveryStep", "-k", "step")
    assert {
        "test_save_step_adds_a_key_and_keeps_the_others",
        "test_step_names_are_literal_keys",
    } <= set(outcomes["failed"])


def test_suite_catches_a_nack_that_forgets_steps(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "NackForgetsSteps", "-k", "steps or checkpoint or last_run")
    assert {
        "test_nack_keeps_steps_and_checkpoint",
        "test_the_claim_and_get_job_return_what_the_last_run_stored",
    } <= set(outcomes["failed"])
    assert {"test_retry_keeps_steps_and_checkpoint", "test_snooze_keeps_steps_and_checkpoint"} <= set(
        outcomes["passed"]
    )


def test_suite_catches_a_claim_that_ignores_versions(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "ClaimIgnoresMaxVersions", "-k", "version or newer")
    assert {
        "test_a_claim_skips_newer_rows_and_leaves_them_untouched",
        "test_names_not_in_max_versions_are_claimed_at_any_version",
        "test_a_claim_honours_any_max_versions",
        "test_a_limited_claim_skips_newer_rows",
    } <= set(outcomes["failed"])
    assert "test_enqueue_stores_the_version_and_every_read_returns_it" in outcomes["passed"]


def test_suite_catches_shutdown_nacks_that_are_not_counted(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "ShutdownNacksNotCounted", "-k", "shutdown_nacks")
    assert {
        "test_nack_with_handler_started_adds_one_to_shutdown_nacks",
        "test_nack_without_handler_started_leaves_shutdown_nacks",
        "test_only_a_shutdown_nack_changes_shutdown_nacks",
    } <= set(outcomes["failed"])
    assert "test_a_new_row_has_no_shutdown_nacks" in outcomes["passed"]


# -- progress and job logs -------------------------------------------------------------------


def test_suite_catches_unfenced_progress_writes(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "ProgressWritesUnfenced", "-k", "progress")
    assert {
        "test_another_worker_writes_no_progress",
        "test_progress_is_not_written_to_a_row_that_is_not_processing",
        "test_the_claim_after_a_nack_returns_the_progress_and_the_fence_follows_the_owner",
    } <= set(outcomes["failed"])
    assert {
        "test_progress_values_round_trip",
        "test_completion_keeps_the_progress",
        "test_a_replayed_dead_letter_starts_without_progress",
    } <= set(outcomes["passed"])


def test_suite_catches_a_dead_letter_move_that_drops_the_logs(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "DeadLetterMoveDropsLogs", "-k", "logs or log_texts")
    assert {
        "test_dead_letter_job_carries_the_logs",
        "test_a_dead_letter_rescue_carries_the_logs",
        "test_expire_unknown_jobs_carries_the_logs",
        "test_a_replay_starts_without_logs_or_progress",
    } <= set(outcomes["failed"])
    assert "the dead-letter row after dead_letter_job" in outcomes["failed"]["test_dead_letter_job_carries_the_logs"]
    assert {
        "test_log_texts_round_trip_exactly",
        "test_logs_are_kept_through_nack_retry_snooze_and_completion",
        "test_get_job_logs_is_none_without_logs",
    } <= set(outcomes["passed"])


def test_suite_catches_a_delete_that_leaves_the_logs_behind(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "DeleteLeavesLogsBehind", "-k", "logs")
    assert set(outcomes["failed"]) == {"test_deleting_a_row_deletes_its_logs"}
    assert "a new row under a deleted row's id" in outcomes["failed"]["test_deleting_a_row_deletes_its_logs"]


# -- unique windows and debounce -------------------------------------------------------------

DEBOUNCE_TESTS = "debounc or repeat or holder or deadline or moved_start"


def test_suite_catches_a_backend_that_ignores_unique_windows(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "WindowIgnored", "-k", f"window or {DEBOUNCE_TESTS}")
    assert {
        "test_a_window_job_is_stored_and_a_repeat_in_the_window_returns_its_id",
        "test_the_window_holds_the_key_while_the_job_runs_is_retried_and_after_it_is_done",
        "test_the_window_holds_the_key_after_a_cancel",
        "test_the_window_holds_the_key_after_a_dead_letter",
        "test_the_window_holds_the_key_after_a_delete",
        "test_the_window_holds_the_key_after_its_row_is_pruned",
        "test_an_expired_window_lets_a_new_job_in_and_the_key_then_points_to_it",
        "test_windows_of_different_keys_are_independent",
        "test_a_window_job_in_one_call_with_plain_keyed_and_held_jobs",
        "test_drawn_sequences_of_windows_hold_as_the_rule_says",
        "test_producers_in_several_processes_racing_on_windows_store_one_row_per_key",
    } <= set(outcomes["failed"])
    assert (
        "cancelled: an enqueue inside the window returned"
        in outcomes["failed"]["test_the_window_holds_the_key_after_a_cancel"]
    )
    # Debounce is not its bug: those contracts still pass.
    assert {
        "test_a_repeat_replaces_the_args_and_moves_the_start_and_changes_nothing_else",
        "test_drawn_repeats_start_at_the_last_start_capped_by_the_first_deadline",
    } <= set(outcomes["passed"])


def test_suite_catches_a_debounce_that_never_moves_the_job(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "DebounceNeverMoves", "-k", DEBOUNCE_TESTS)
    assert {
        "test_a_repeat_replaces_the_args_and_moves_the_start_and_changes_nothing_else",
        "test_a_repeat_never_moves_the_start_past_the_first_deadline",
        "test_after_the_holder_is_claimed_an_enqueue_starts_a_new_row",
        "test_once_the_deadline_has_passed_repeats_leave_the_job_due_at_it",
        "test_the_claim_follows_a_moved_start",
        "test_a_debounced_repeat_in_one_call_with_other_jobs",
        "test_drawn_repeats_start_at_the_last_start_capped_by_the_first_deadline",
    } <= set(outcomes["failed"])
    assert {
        "test_a_first_debounced_enqueue_is_stored_as_a_keyed_job",
        "test_a_plain_keyed_holder_is_left_as_it_is",
        "test_a_cancelled_holder_releases_the_key",
    } <= set(outcomes["passed"])


def test_suite_catches_a_debounce_that_moves_the_job_past_its_deadline(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "DebounceIgnoresTheDeadline", "-k", DEBOUNCE_TESTS)
    assert {
        "test_a_repeat_never_moves_the_start_past_the_first_deadline",
        "test_after_the_holder_is_claimed_an_enqueue_starts_a_new_row",
        "test_once_the_deadline_has_passed_repeats_leave_the_job_due_at_it",
        "test_a_debounced_repeat_in_one_call_with_other_jobs",
        "test_drawn_repeats_start_at_the_last_start_capped_by_the_first_deadline",
    } <= set(outcomes["failed"])
    assert {
        "test_a_repeat_replaces_the_args_and_moves_the_start_and_changes_nothing_else",
        "test_a_plain_keyed_holder_is_left_as_it_is",
        "test_the_claim_follows_a_moved_start",
    } <= set(outcomes["passed"])


# -- re-sealing stored sealed values (KeyRotationStore) ---------------------------------------

KEY_ROTATION_WALKS = {
    "test_key_rotation_walk_returns_every_sealed_row_once_with_its_stored_text",
    "test_key_rotation_walk_of_a_store_without_sealed_values_ends",
    "test_key_rotation_walks_of_drawn_mixes_return_every_sealed_row_once",
    "test_key_rotation_walk_finds_rows_left_alone_once_while_others_come_and_go",
}
KEY_ROTATION_RESEALS = {
    "test_key_rotation_reseal_writes_the_new_values_and_nothing_else",
    "test_key_rotation_reseal_with_a_stale_value_writes_no_field",
    "test_key_rotation_reseal_of_a_row_that_is_gone_is_false",
    "test_key_rotation_reseal_rewrites_a_dead_letter_row",
    "test_key_rotation_reseal_of_a_purged_dead_letter_is_false",
    "test_key_rotation_reseal_rewrites_a_sealed_progress_message_and_the_worker_wins",
    "test_key_rotation_reseal_leaves_the_rest_of_the_row_to_its_worker",
}
ROTATE_KEYS = "test_key_rotation_by_rotate_keys_reseals_every_stored_value_with_the_newest_key"


def test_suite_catches_a_sealed_rows_walk_that_skips_dead_letter_rows(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "SealedRowsSkipDeadLetters", "-k", "key_rotation")
    assert {
        "test_key_rotation_walk_returns_every_sealed_row_once_with_its_stored_text",
        "test_key_rotation_walk_finds_rows_left_alone_once_while_others_come_and_go",
        "test_key_rotation_reseal_rewrites_a_dead_letter_row",
        ROTATE_KEYS,
    } <= set(outcomes["failed"])
    assert "must return each of the" in outcomes["failed"]["test_key_rotation_reseal_rewrites_a_dead_letter_row"]
    assert (
        "dead_letter:"
        in outcomes["failed"]["test_key_rotation_walk_returns_every_sealed_row_once_with_its_stored_text"]
    )
    # Its re-seal is right: the contracts that read no dead-letter row still pass.
    assert {
        "test_key_rotation_walk_of_a_store_without_sealed_values_ends",
        "test_key_rotation_reseal_writes_the_new_values_and_nothing_else",
        "test_key_rotation_reseal_with_a_stale_value_writes_no_field",
        "test_key_rotation_reseal_leaves_the_rest_of_the_row_to_its_worker",
    } <= set(outcomes["passed"])


def test_suite_catches_a_sealed_rows_walk_by_offset(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "SealedRowsByOffset", "-k", "key_rotation")
    name = "test_key_rotation_walk_finds_rows_left_alone_once_while_others_come_and_go"
    assert set(outcomes["failed"]) == {name}
    assert "nobody touched during the walk must come back once each" in outcomes["failed"][name]
    assert (KEY_ROTATION_WALKS | KEY_ROTATION_RESEALS | {ROTATE_KEYS}) - {name} == set(outcomes["passed"])


def test_suite_catches_a_reseal_that_ignores_the_old_value(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "ResealIgnoresTheOldValue", "-k", "key_rotation")
    assert {
        "test_key_rotation_reseal_writes_the_new_values_and_nothing_else",
        "test_key_rotation_reseal_with_a_stale_value_writes_no_field",
        "test_key_rotation_reseal_rewrites_a_dead_letter_row",
        "test_key_rotation_reseal_rewrites_a_sealed_progress_message_and_the_worker_wins",
    } <= set(outcomes["failed"])
    assert (
        "wrote over progress the worker saved"
        in outcomes["failed"]["test_key_rotation_reseal_rewrites_a_sealed_progress_message_and_the_worker_wins"]
    )
    assert set(outcomes["passed"]) >= KEY_ROTATION_WALKS
    assert "test_key_rotation_reseal_of_a_row_that_is_gone_is_false" in outcomes["passed"]


def test_suite_catches_a_reseal_that_writes_field_by_field(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "ResealFieldByField", "-k", "key_rotation")
    name = "test_key_rotation_reseal_with_a_stale_value_writes_no_field"
    assert set(outcomes["failed"]) == {name}
    assert "a reseal_row that returned False wrote a field" in outcomes["failed"][name]
