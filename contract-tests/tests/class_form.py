"""Runs the suite's class form inside a pytester session, against a backend named in `broken_backends`."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent

CLASS_FORM = """
import functools

import pytest
from soniq.params import PrepareWorkerParams
from soniq_contract_tests import BackendContractSuite, UrlBackendFactory
from broken_backends import *  # noqa: F403
from soniq_memory import MemoryBackend


def build(namespace):
    return {backend}(namespace=namespace)


async def put_raw_args(backend, job_id, raw_args):
    backend.put_raw_args(job_id, raw_args)


def plain_factory(url):
    # Not a UrlBackendFactory: the suite cannot tell from it which URL a worker process should open.
    from soniq.discovery import backend_class_for

    return lambda namespace: backend_class_for(url).from_url(url, namespace=namespace)


class TestUnderTest(BackendContractSuite):
{knobs}

    @pytest.fixture
    def soniq_backend_factory(self, tmp_path):
        return {factory}

    @pytest.fixture
    def soniq_unservable_worker(self):
        # The memory store serves no worker without a slot.
        return PrepareWorkerParams(concurrency=0, prefetch=0)

    @pytest.fixture
    def soniq_corrupt_row(self):
        return {corrupt_row}
{extra}
"""

WITH_TRANSACTION = """
    @pytest.fixture
    def soniq_transaction(self):
        return memory_transaction
"""

PROCESS_SCENARIOS = {
    "test_idle_sigterm_exits_promptly_with_code_zero",
    "test_async_force_timeout_nacks_the_row_with_the_seed_field_set",
    "test_clean_drain_finishes_the_running_job",
    "test_no_claims_while_draining",
    "test_sync_thread_is_waited_for_past_its_grace_then_marked_done",
    "test_second_sigterm_goes_straight_to_the_force_path",
    "test_sigkill_leaves_the_row_processing_and_a_later_process_recovers_and_completes_it",
    "test_a_live_workers_rows_are_never_recovered",
    "test_nacks_cost_no_budget_however_many_shutdowns_abandon_the_job",
    "test_a_job_that_kills_its_worker_every_time_ends_in_the_dead_letter_table",
    "test_prefetched_rows_are_released_untouched_and_running_rows_nacked",
    "test_sigkilled_worker_under_dead_letter_policy_sends_its_running_row_to_review",
    "test_rolling_deploy_loses_nothing_and_old_workers_never_claim_new_names",
    # issue 19: the fleet scenarios (limits, cancelling, wait_for, a dependency graph)
    "test_max_concurrent_holds_across_worker_processes_under_load",
    "test_rate_limit_holds_per_window_across_worker_processes",
    "test_a_running_async_job_cancelled_from_another_process_ends_cancelled_within_a_second",
    "test_a_sync_job_polling_cancel_requested_ends_cancelled",
    "test_wait_for_returns_results_and_raises_failures_across_processes",
    "test_a_graph_of_1000_jobs_completes_in_order_across_worker_processes",
    # issue 28: the traceback a real worker stores
    "test_a_real_worker_stores_the_traceback_from_the_handlers_frame",
    # round three: deploy day (resumable steps, job versions, a paused queue)
    "test_a_sigterm_mid_step_resumes_on_a_new_worker_without_rerunning_done_steps",
    "test_old_and_new_versions_of_a_job_share_the_fleet_during_a_deploy",
    "test_a_queue_paused_for_a_deploy_holds_its_backlog_until_resumed",
}
TRANSACTIONAL = {
    "test_transactional_enqueue_is_invisible_until_the_caller_commits",
    "test_transactional_enqueue_is_undone_by_the_callers_rollback",
}


def _test_name(nodeid: str) -> str:
    return nodeid.split("::")[-1].split("[")[0]


# Broken backends are expected to fail: give up on a silent worker sooner than the default.
FAST_KNOBS = "    heartbeat_timeout = 0.3\n    stale_deadline = 1.0"


def run_class_form(
    pytester: pytest.Pytester,
    backend: str,
    *args: str,
    fast: bool = True,
    factory: str = "build",
    extra: str = "",
    corrupt_row: str = "put_raw_args",
) -> dict[str, dict[str, str]]:
    """Run the suite's class form against `backend`: by outcome, each test's name and its message."""
    pytester.syspathinsert(HERE)
    # A neutral module name: `-k nack` must not match every test through the file name.
    source = CLASS_FORM.format(
        backend=backend,
        knobs=FAST_KNOBS if fast else "    pass",
        factory=factory,
        extra=extra,
        corrupt_row=corrupt_row,
    )
    pytester.makepyfile(test_backend_under_test=source)
    if "no:asyncio" not in args:
        pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    recorder = pytester.inline_run("-p", "no:cacheprovider", *args)
    outcomes: dict[str, dict[str, str]] = {"passed": {}, "skipped": {}, "failed": {}}
    for report in recorder.getreports("pytest_runtest_logreport"):
        if report.when == "call" and report.passed:
            outcomes["passed"][_test_name(report.nodeid)] = ""
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            outcomes["skipped"][_test_name(report.nodeid)] = reason
        elif report.failed:
            outcomes["failed"][_test_name(report.nodeid)] = str(report.longrepr)
    return outcomes


def run_class_form_output(pytester: pytest.Pytester, backend: str, *args: str) -> pytest.RunResult:
    """The same class form, run in process for its terminal output (the summary lines, ``-rs`` reasons)."""
    pytester.syspathinsert(HERE)
    source = CLASS_FORM.format(backend=backend, knobs=FAST_KNOBS, factory="build", extra="", corrupt_row="put_raw_args")
    pytester.makepyfile(test_backend_under_test=source)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs", *args)
