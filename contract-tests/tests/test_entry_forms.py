"""The URL form (``--pyargs soniq_contract_tests --soniq-url``) and the ``soniq-contract-tests`` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from class_form import PROCESS_SCENARIOS

from soniq_contract_tests.cli import main

CONTRACT_CLASS = "TestBackendContract"


@pytest.fixture(autouse=True)
def _quiet_pytest_asyncio(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


def _by_outcome(recorder: pytest.HookRecorder) -> tuple[list[str], list[str], list[str]]:
    passed, skipped, failed = recorder.listoutcomes()
    return [r.nodeid for r in passed], [r.nodeid for r in skipped], [r.nodeid for r in failed]


def test_url_form_runs_the_whole_suite_against_memory(pytester: pytest.Pytester) -> None:
    recorder = pytester.inline_run(
        "-p", "no:cacheprovider", "--pyargs", "soniq_contract_tests", "--soniq-url", "memory://"
    )
    passed, _skipped, failed = _by_outcome(recorder)
    assert failed == []
    contract_passed = [nodeid for nodeid in passed if CONTRACT_CLASS in nodeid]
    assert len(contract_passed) >= 100
    # What does not apply to memory:// says why; the real-process scenarios are deselected, not skipped.
    reasons = {
        report.nodeid.split("::")[-1]: str(report.longrepr)
        for report in recorder.getreports("pytest_runtest_logreport")
        if report.skipped
    }
    assert set(reasons) == {
        "test_transactional_enqueue_is_invisible_until_the_caller_commits",
        "test_transactional_enqueue_is_undone_by_the_callers_rollback",
        "test_prepare_worker_refuses_what_it_cannot_serve_with_a_soniq_error",
    }
    assert all("transactional_enqueue is False" in reasons[name] for name in reasons if "transactional" in name)
    assert "soniq_unservable_worker" in reasons["test_prepare_worker_refuses_what_it_cannot_serve_with_a_soniq_error"]
    deselected = [item.nodeid for call in recorder.getcalls("pytest_deselected") for item in call.items]
    assert len(deselected) == len(PROCESS_SCENARIOS)
    assert all("TestBackendContract::test_" in nodeid for nodeid in deselected)


def test_url_form_keeps_the_process_scenarios_for_a_shared_store(pytester: pytest.Pytester, tmp_path: Path) -> None:
    recorder = pytester.inline_run(
        "-p", "no:cacheprovider", "--pyargs", "soniq_contract_tests", "--collect-only",
        "--soniq-url", f"sqlite:///{tmp_path}/url-form.db", "-m", "soniq_worker_process",
    )  # fmt: skip
    (finished,) = recorder.getcalls("pytest_collection_finish")
    selected = [item.nodeid.split("::")[-1] for item in finished.session.items]
    assert set(selected) == PROCESS_SCENARIOS
    assert "test_sigkill_leaves_the_row_processing_and_a_later_process_recovers_and_completes_it" in selected
    assert "test_rolling_deploy_loses_nothing_and_old_workers_never_claim_new_names" in selected


def test_url_form_reads_the_url_from_the_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SONIQ_CONTRACT_URL", "memory://")
    recorder = pytester.inline_run("-p", "no:cacheprovider", "--pyargs", "soniq_contract_tests", "-k", "nack")
    passed, _skipped, failed = _by_outcome(recorder)
    assert failed == []
    assert any("test_nack_preserves_attempts" in nodeid for nodeid in passed)


def test_url_form_without_a_url_skips_and_says_how_to_pass_one(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SONIQ_CONTRACT_URL", raising=False)
    recorder = pytester.inline_run("-p", "no:cacheprovider", "--pyargs", "soniq_contract_tests", "-k", "nack")
    passed, skipped_reports, failed = recorder.listoutcomes()
    assert (passed, failed) == ([], [])
    assert skipped_reports
    for report in skipped_reports:
        assert isinstance(report.longrepr, tuple)
        assert "--soniq-url" in report.longrepr[2]


def test_url_form_passes_soniq_options_to_from_url(pytester: pytest.Pytester) -> None:
    recorder = pytester.inline_run(
        "-p", "no:cacheprovider", "--pyargs", "soniq_contract_tests",
        "--soniq-url", "memory://", "--soniq-option", "pool_size=3", "-k", "test_nack_is_idempotent",
    )  # fmt: skip
    reports = [r for r in recorder.getreports("pytest_runtest_logreport") if r.failed]
    assert reports, "an option the memory backend does not accept must make the tests error"
    assert "pool_size" in str(reports[0].longrepr)


def test_url_form_with_an_unknown_scheme_names_what_is_installed(pytester: pytest.Pytester) -> None:
    recorder = pytester.inline_run(
        "-p",
        "no:cacheprovider",
        "--pyargs",
        "soniq_contract_tests",
        "--soniq-url",
        "nosuch://x",
        "-k",
        "nack_is_idempotent",
    )
    errors = [r for r in recorder.getreports("pytest_runtest_logreport") if r.failed]
    assert errors
    assert "nosuch" in str(errors[0].longrepr)
    assert "memory" in str(errors[0].longrepr)


def _cli() -> list[str]:
    script = Path(sys.executable).parent / "soniq-contract-tests"
    return [str(script)] if script.exists() else [sys.executable, "-m", "soniq_contract_tests.cli"]


def test_cli_runs_the_suite_and_returns_pytest_exit_code(tmp_path: Path) -> None:
    ok = subprocess.run(
        [*_cli(), "memory://", "-q", "-p", "no:cacheprovider", "-k", "nack"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "passed" in ok.stdout
    assert "failed" not in ok.stdout
    broken = subprocess.run(
        [*_cli(), "nosuch://x", "-q", "-p", "no:cacheprovider", "-k", "nack_is_idempotent"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "nosuch" in broken.stdout


def test_cli_without_a_url_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: soniq-contract-tests URL" in capsys.readouterr().err
    assert main(["--help"]) == 0
    assert main(["-q"]) == 2
