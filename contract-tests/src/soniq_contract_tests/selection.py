"""Which parts of the suite apply to a backend: decided here, and only here.

Two questions. Real worker processes: the URL form asks before collection
ends (and deselects what does not apply, so it is not reported as a skip);
the class form cannot know the backend until its fixtures run, so it asks
the same question there and skips with the same reason. Roles: every test
needs the roles `roles_for_test` names (its module's in `MODULE_ROLES`, or its
own in `TEST_ROLES` or in a ``soniq_role`` mark); a test needing a role the
backend does not declare in `capabilities.roles` is skipped, in both forms,
with the reason ``<Backend> does not declare <Role>``. The core role's tests
always run. Imports nothing heavy: the plugin calls it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from soniq.backend import BackendCapabilities

WORKER_PROCESS_MARK = "soniq_worker_process"
"""The marker on every real-process shutdown scenario."""


def worker_processes_excluded(capabilities: BackendCapabilities, backend_name: str) -> str | None:
    """Why the real-process scenarios do not apply to this backend, or None when they do.

    A `soniq worker` process must reach the same rows as the test, which an
    in-process store cannot offer; a store that several processes can share
    must pass them.
    """
    if capabilities.shared_across_processes:
        return None
    return (
        f"the real-process shutdown scenarios do not apply to {backend_name}: it is not shared across processes "
        "(capabilities.shared_across_processes is False)"
    )


# -- roles ------------------------------------------------------------------------------------

CORE_ROLE = "QueueStore"
"""The role every backend fills: its tests always run."""

ROLE_MARK = "soniq_role"
"""``@pytest.mark.soniq_role("DeadLetterStore", ...)`` on a test names the roles it needs, in place
of its module's entry in `MODULE_ROLES` (for tests a backend package adds to its own subclass)."""

MODULE_ROLES: dict[str, tuple[str, ...]] = {
    # The core role: what every backend must pass.
    "claim": ("QueueStore",),
    "corrupt_rows": ("QueueStore",),
    "dedup": ("QueueStore",),
    "enqueue": ("QueueStore",),
    "error_text": ("QueueStore",),
    "expire_unknown": ("QueueStore",),
    "fencing": ("QueueStore",),
    "job_names": ("QueueStore",),
    "nack": ("QueueStore",),
    "recovery": ("QueueStore",),
    "retention": ("QueueStore",),  # delete_row and delete_job: QueueStore methods, despite the name
    "rolling_deploy": ("QueueStore",),
    "scheduling": ("QueueStore",),  # scheduled_at and priority order of the claim, not ScheduleStore
    "settle": ("QueueStore",),
    "stats": ("QueueStore",),
    "status_rule": ("QueueStore",),
    "transactional_enqueue": ("QueueStore",),  # gated by capabilities.transactional_enqueue as well
    "worker_processes": ("QueueStore",),
    "workers": ("QueueStore",),
    # Optional roles.
    "dead_letter": ("DeadLetterStore",),
    "dead_letter_bulk": ("DeadLetterStore",),
    "schedules": ("ScheduleStore",),
    "leases": ("ScheduleStore",),
    "reads": ("OperatorReads",),
    "results_listing": ("OperatorReads",),
    "read_bounds": ("OperatorReads",),
    "schema_setup": ("SchemaAdmin",),
    "schema_status": ("SchemaAdmin",),
    "cancel_running": ("CancelChannel",),
    "job_changes": ("CancelChannel",),
    "limits": ("LimitStore",),
    "dependencies": ("DependencyStore",),
    "pruning": ("RetentionStore",),
    "fleet_processes": ("LimitStore",),  # each test names its own below
    "queue_pause": ("QueuePauseStore",),
    "job_steps": ("JobStepStore",),
    "job_versions": ("VersionedJobs",),
    "job_progress": ("JobProgressStore",),
    "job_logs": ("JobLogStore",),
    "deploy_day": ("QueuePauseStore",),  # each test names its own below
    "unique_windows": ("UniqueWindows",),
    "debounced_jobs": ("DebouncedJobs",),
    "key_rotation": ("KeyRotationStore",),  # progress rows and dead-letter reads where declared
}
"""The roles the tests of each module under `soniq_contract_tests.suite` need, the module's own
role first (it names the role in a skip). A test that calls more is listed in `TEST_ROLES`."""

TEST_ROLES: dict[str, tuple[str, ...]] = {
    # core-role modules: tests that also read through an optional role
    "test_listings_and_get_job_show_a_corrupt_row": ("QueueStore", "OperatorReads"),
    "test_dead_letter_listing_and_get_show_a_corrupt_row": ("QueueStore", "DeadLetterStore"),
    "test_a_dead_letter_keeps_the_version_and_a_replay_queues_it_again": ("VersionedJobs", "DeadLetterStore"),
    "test_list_jobs_filters_and_pages_newest_first": ("OperatorReads",),  # job_page and app.list_jobs
    "test_awkward_text_round_trips_in_queue_job_name_and_args": ("QueueStore", "OperatorReads", "DeadLetterStore"),
    "test_retry_keeps_a_multi_line_traceback_byte_for_byte": ("QueueStore", "OperatorReads"),
    "test_the_dead_letter_move_keeps_the_traceback_byte_for_byte": ("QueueStore", "DeadLetterStore"),
    "test_the_dead_letter_row_holds_the_last_runs_traceback": ("QueueStore", "DeadLetterStore"),
    "test_a_real_worker_stores_the_traceback_from_the_handlers_frame": ("QueueStore", "DeadLetterStore"),
    "test_expire_unknown_jobs_moves_queued_rows_of_unknown_names": ("QueueStore", "DeadLetterStore"),
    "test_expire_unknown_jobs_moves_only_rows_older_than_asked": ("QueueStore", "DeadLetterStore"),
    "test_fenced_write_by_a_non_owner_writes_nothing": ("QueueStore", "DeadLetterStore"),
    "test_fenced_write_on_a_row_that_is_not_processing_writes_nothing": ("QueueStore", "DeadLetterStore"),
    "test_worker_whose_row_was_recovered_and_reclaimed_cannot_overwrite_it": ("QueueStore", "DeadLetterStore"),
    "test_rescue_jobs_writes_exactly_the_given_rescue": ("QueueStore", "DeadLetterStore"),
    "test_rescue_jobs_leaves_alone_a_row_that_changed_since_it_was_read": ("QueueStore", "DeadLetterStore"),
    "test_rescue_jobs_is_fenced_against_a_second_sweeper": ("QueueStore", "DeadLetterStore"),
    "test_stale_recovery_dead_letters_started_row_as_zombie_under_dead_letter_policy": (
        "QueueStore",
        "DeadLetterStore",
    ),
    "test_stale_recovery_never_dead_letters_an_unstarted_row": ("QueueStore", "DeadLetterStore"),
    "test_stale_recovery_dead_letters_at_max_attempts_as_worker_lost": ("QueueStore", "DeadLetterStore"),
    "test_replayed_job_counts_in_its_queue_and_the_dead_letter_stays_counted": ("QueueStore", "DeadLetterStore"),
    "test_status_filter_returns_exactly_the_rows_in_that_status": ("QueueStore", "OperatorReads"),
    "test_a_job_that_kills_its_worker_every_time_ends_in_the_dead_letter_table": ("QueueStore", "DeadLetterStore"),
    "test_sigkilled_worker_under_dead_letter_policy_sends_its_running_row_to_review": (
        "QueueStore",
        "DeadLetterStore",
    ),
    # optional-role modules: tests that need a second role, or only the core one
    "test_dead_letter_page_pages_and_filters": ("OperatorReads", "DeadLetterStore"),
    "test_worker_state_and_last_shutdown_round_trip": ("QueueStore",),
    "test_an_id_no_store_can_hold_is_not_found_by_every_by_id_call": (
        "QueueStore",
        "DeadLetterStore",
        "CancelChannel",
    ),
    "test_a_schedule_name_no_store_can_hold_is_not_found": ("ScheduleStore",),
    "test_a_queue_filter_enqueue_would_refuse_is_refused_by_name": ("OperatorReads", "DeadLetterStore"),
    "test_a_job_name_or_reason_filter_no_store_can_hold_is_refused_by_name": ("DeadLetterStore",),
    "test_a_limit_or_offset_out_of_bounds_is_refused_by_name": ("OperatorReads", "DeadLetterStore"),
    "test_schedulers_in_several_processes_enqueue_each_due_time_once": ("ScheduleStore", "OperatorReads"),
    "test_request_cancel_of_a_finished_or_unknown_job_writes_nothing": ("CancelChannel", "DeadLetterStore"),
    "test_cancelling_fails_dependents": ("CancelChannel", "DependencyStore"),
    "test_a_watched_dependent_cancelled_by_its_dependency_wakes_the_waiter": ("CancelChannel", "DependencyStore"),
    "test_the_dependency_fields_round_trip": ("DependencyStore", "OperatorReads"),
    "test_rows_waiting_on_a_dependency_are_not_claimed_by_a_limited_claim": ("LimitStore", "DependencyStore"),
    "test_completion_stores_expires_at": ("QueueStore",),
    "test_prune_dead_letters_deletes_rows_moved_before_the_cutoff": ("RetentionStore", "DeadLetterStore"),
    "test_max_concurrent_holds_across_worker_processes_under_load": ("LimitStore", "OperatorReads"),
    "test_rate_limit_holds_per_window_across_worker_processes": ("LimitStore", "OperatorReads"),
    "test_a_running_async_job_cancelled_from_another_process_ends_cancelled_within_a_second": ("CancelChannel",),
    "test_a_sync_job_polling_cancel_requested_ends_cancelled": ("CancelChannel",),
    "test_wait_for_returns_results_and_raises_failures_across_processes": ("CancelChannel", "DeadLetterStore"),
    "test_a_graph_of_1000_jobs_completes_in_order_across_worker_processes": ("DependencyStore", "OperatorReads"),
    "test_a_limited_claim_leaves_excluded_queues_untouched": ("QueuePauseStore", "LimitStore"),
    "test_a_cancel_request_keeps_steps_and_checkpoint": ("JobStepStore", "CancelChannel"),
    "test_a_replayed_dead_letter_starts_without_steps": ("JobStepStore", "DeadLetterStore"),
    "test_a_limited_claim_skips_newer_rows": ("VersionedJobs", "LimitStore"),
    "test_max_versions_and_excluded_queues_together": ("VersionedJobs", "QueuePauseStore"),
    "test_a_sigterm_mid_step_resumes_on_a_new_worker_without_rerunning_done_steps": ("JobStepStore",),
    "test_old_and_new_versions_of_a_job_share_the_fleet_during_a_deploy": ("VersionedJobs",),
    "test_a_queue_paused_for_a_deploy_holds_its_backlog_until_resumed": ("QueuePauseStore",),
    "test_job_page_returns_the_progress": ("JobProgressStore", "OperatorReads"),
    "test_a_replayed_dead_letter_starts_without_progress": ("JobProgressStore", "DeadLetterStore"),
    "test_a_replay_starts_without_logs_or_progress": ("JobLogStore", "JobProgressStore", "DeadLetterStore"),
    "test_logs_and_progress_are_written_apart": ("JobLogStore", "JobProgressStore"),
    "test_purging_a_dead_letter_deletes_its_logs": ("JobLogStore", "DeadLetterStore"),
    "test_pruning_deletes_the_logs": ("JobLogStore", "RetentionStore"),
    "test_the_window_holds_the_key_after_a_dead_letter": ("UniqueWindows", "DeadLetterStore"),
    "test_the_window_holds_the_key_after_its_row_is_pruned": ("UniqueWindows", "RetentionStore"),
    "test_key_rotation_reseal_of_a_purged_dead_letter_is_false": ("KeyRotationStore", "DeadLetterStore"),
    "test_key_rotation_reseal_rewrites_a_sealed_progress_message_and_the_worker_wins": (
        "KeyRotationStore",
        "JobProgressStore",
    ),
}
"""Tests that need other roles than their module's, by test name (names are unique across the
suite: every module is a mixin of the one `BackendContractSuite` class)."""

SUITE_PACKAGE_PREFIX = "soniq_contract_tests.suite."


def roles_for_test(module: str, name: str, marked: tuple[str, ...] | None = None) -> tuple[str, ...] | None:
    """The roles a test needs: its `soniq_role` mark's, else its entry in `TEST_ROLES`, else its
    module's in `MODULE_ROLES`. None for a test outside the suite's modules that carries no mark
    (a backend package's own test in its subclass: it is not gated)."""
    if marked:
        return marked
    if not module.startswith(SUITE_PACKAGE_PREFIX):
        return None
    if name in TEST_ROLES:
        return TEST_ROLES[name]
    short = module[len(SUITE_PACKAGE_PREFIX) :]
    if short not in MODULE_ROLES:
        raise LookupError(
            f"the contract module {module} declares no role: add it to soniq_contract_tests.selection.MODULE_ROLES"
        )
    return MODULE_ROLES[short]


def missing_roles(needed: tuple[str, ...], declared: Mapping[str, int]) -> tuple[str, ...]:
    """The roles of `needed` the backend does not declare (the core role is never missing: a backend
    without it is refused at construction)."""
    return tuple(role for role in needed if role != CORE_ROLE and role not in declared)


def not_declared_reason(backend_name: str, missing: tuple[str, ...]) -> str:
    """The skip reason of a test whose roles the backend does not declare."""
    return f"{backend_name} does not declare {', '.join(missing)}"


@dataclass
class RoleReport:
    """What the terminal summary says about one backend class the session ran the suite against."""

    roles: str
    """``QueueStore v1, DeadLetterStore v1``, as `BackendCapabilities.describe_roles` gives it."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Tests skipped because the backend does not declare a role they need, counted per role."""

    def lines(self, backend_name: str) -> list[str]:
        skipped = ", ".join(
            f"{role} ({count} test{'s' if count != 1 else ''})" for role, count in sorted(self.skipped.items())
        )
        return [
            f"soniq contract suite: {backend_name} roles: {self.roles}",
            f"soniq contract suite: {backend_name} skipped as not declared: {skipped or 'none'}",
        ]
