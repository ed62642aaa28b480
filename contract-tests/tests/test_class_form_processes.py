"""The class form runs the real-process shutdown scenarios, or says which fixture it needs."""

from __future__ import annotations

import pytest
from class_form import PROCESS_SCENARIOS, run_class_form

SQLITE_URL_FACTORY = 'UrlBackendFactory(f"sqlite:///{tmp_path}/contract.db")'
SQLITE_PLAIN_FACTORY = 'plain_factory(f"sqlite:///{tmp_path}/c.db")'


def test_class_form_runs_the_process_scenarios_with_a_url_factory(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(
        pytester,
        "MemoryBackend",
        "-k",
        "idle_sigterm or clean_drain or prefetched_rows",
        fast=False,
        factory=SQLITE_URL_FACTORY,
    )
    assert outcomes["failed"] == outcomes["skipped"] == {}
    assert set(outcomes["passed"]) == {
        "test_idle_sigterm_exits_promptly_with_code_zero",
        "test_clean_drain_finishes_the_running_job",
        "test_prefetched_rows_are_released_untouched_and_running_rows_nacked",
    }


def test_class_form_runs_the_process_scenarios_at_the_overridden_worker_url(pytester: pytest.Pytester) -> None:
    worker_url = """
    @pytest.fixture
    def soniq_worker_url(self, tmp_path):
        return f"sqlite:///{tmp_path}/c.db"
"""
    outcomes = run_class_form(
        pytester, "MemoryBackend", "-k", "idle_sigterm", fast=False, factory=SQLITE_PLAIN_FACTORY, extra=worker_url
    )
    assert outcomes["failed"] == outcomes["skipped"] == {}
    assert set(outcomes["passed"]) == {"test_idle_sigterm_exits_promptly_with_code_zero"}


def test_class_form_without_a_worker_url_skips_the_scenarios_naming_the_fixture(pytester: pytest.Pytester) -> None:
    outcomes = run_class_form(pytester, "MemoryBackend", "-m", "soniq_worker_process", factory=SQLITE_PLAIN_FACTORY)
    assert set(outcomes["skipped"]) == PROCESS_SCENARIOS
    for reason in outcomes["skipped"].values():
        assert "override the fixture soniq_worker_url" in reason
