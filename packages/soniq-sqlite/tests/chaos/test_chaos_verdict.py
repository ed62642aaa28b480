"""The chaos verdict on hand-made evidence: each rule it applies can fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from soniq_contract_tests.chaos.report import STALE_LOG_LAG, stale_judgments
from soniq_contract_tests.chaos_verdict import MAX_ATTEMPTS, Fault, PlannedJob, Run, judge, read_runs

pytestmark = pytest.mark.chaos


def job(name: str = "chaos.async", fate: str = "ok") -> PlannedJob:
    return PlannedJob(key="j1", job_id="id-1", job_name=name, fate=fate, seconds=0.1)


def done(attempts: int = 0) -> dict[str, Any]:
    return {"status": "done", "attempts": attempts, "result": {"key": "j1"}}


def test_a_rerun_after_a_returned_run_needs_a_fault_of_that_process() -> None:
    runs = {"j1": [Run(pid=10, start=1.0, end=1.1, outcome="ok"), Run(pid=11, start=5.0, end=5.1, outcome="ok")]}
    unexplained = judge([job()], {"id-1": done(1)}, {}, runs, faults=[])
    assert unexplained.duplicates == {"unexplained": 1}
    assert any("no fault explains it" in v for v in unexplained.violations)
    killed = judge([job()], {"id-1": done(1)}, {}, runs, faults=[Fault("sigkill", 1.2, 10)])
    assert (killed.duplicates, killed.violations) == ({"sigkill": 1}, [])
    other_pid = judge([job()], {"id-1": done(1)}, {}, runs, faults=[Fault("sigkill", 1.2, 99)])
    assert other_pid.duplicates == {"unexplained": 1}


def test_a_sweep_that_judged_the_live_worker_stale_explains_the_rerun_of_its_returned_run() -> None:
    runs = {"j1": [Run(pid=10, start=1.0, end=3.0, outcome="ok"), Run(pid=11, start=5.0, end=5.1, outcome="ok")]}
    judged = judge([job()], {"id-1": done(1)}, {}, runs, faults=[Fault("stale_judgment", 2.5, 10)])
    assert (judged.duplicates, judged.violations) == ({"stale_judgment": 1}, [])
    other_worker = judge([job()], {"id-1": done(1)}, {}, runs, faults=[Fault("stale_judgment", 2.5, 12)])
    assert other_worker.duplicates == {"unexplained": 1}
    before_the_run = judge([job()], {"id-1": done(1)}, {}, runs, faults=[Fault("stale_judgment", 0.5, 10)])
    assert before_the_run.duplicates == {"unexplained": 1}


def test_a_connection_fault_that_lasts_explains_reruns_anywhere_in_its_window() -> None:
    runs = {"j1": [Run(pid=10, start=3.0, end=3.1, outcome="ok"), Run(pid=10, start=6.0, end=6.1, outcome="ok")]}
    # A failover asked for at 1.0 that took until 4.0: the returned run at 3.0 was inside it.
    lasting = judge([job()], {"id-1": done(1)}, {}, runs, faults=[Fault("connection_kill", 1.0, until=4.0)])
    assert (lasting.duplicates, lasting.violations) == ({"connection_kill": 1}, [])
    over_before = judge([job()], {"id-1": done(1)}, {}, runs, faults=[Fault("connection_kill", 1.0, until=2.0)])
    assert over_before.duplicates == {"unexplained": 1}
    after_the_rerun = judge([job()], {"id-1": done(1)}, {}, runs, faults=[Fault("connection_kill", 7.0, until=9.0)])
    assert after_the_rerun.duplicates == {"unexplained": 1}


def test_stale_judgments_are_read_from_sweep_lines_and_never_name_a_killed_worker() -> None:
    line = (
        "2026-12-02 17:00:0{s},000 WARNING soniq.worker: stale recovery: workers {ids}; "
        "requeued 1 rows, dead-lettered 0"
    )
    # One sweep that judged several workers names them all, joined as soniq.worker.loops.sweep_once does.
    several = ", ".join(["host-10-ab", "host-11-cd", "host-13-gh"])
    logs = [line.format(s=1, ids=several), "unrelated line", line.format(s=2, ids="host-12-ef")]
    judged = stale_judgments(logs, faults=[Fault("sigkill", 0.0, 11)])
    assert [(f.kind, f.pid) for f in judged] == [("stale_judgment", 10), ("stale_judgment", 13), ("stale_judgment", 12)]
    assert judged[2].at - judged[0].at == pytest.approx(1.0)


def test_a_sweep_logged_just_after_the_runs_it_fenced_still_explains_them() -> None:
    """Seen on the Redis Cluster chaos run: a sweep after a failover judged three live workers stale at
    once; the judged worker logged a handler start 8 ms before the sweeper's line (the row was claimed and
    marked started before the sweep), and the sweeper logs only after its writes returned."""
    line = (
        "2026-12-02 17:00:01,000 WARNING soniq.worker: stale recovery: workers host-7-aa, host-10-ab; "
        "requeued 9 rows, dead-lettered 0"
    )
    (judgment,) = [f for f in stale_judgments([line], faults=[]) if f.pid == 10]
    swept = judgment.at + STALE_LOG_LAG
    just_before = {"j1": [Run(10, swept - 0.008, swept + 0.1, "ok"), Run(11, swept + 1.0, swept + 1.1, "ok")]}
    verdict = judge([job()], {"id-1": done(1)}, {}, just_before, faults=[judgment])
    assert (verdict.duplicates, verdict.violations) == ({"stale_judgment": 1}, [])
    # A re-run that started a moment before the sweeper got to log its writes.
    rerun_first = {"j1": [Run(10, swept - 1.0, swept - 0.9, "ok"), Run(10, swept - 0.01, swept + 0.1, "ok")]}
    assert judge([job()], {"id-1": done(1)}, {}, rerun_first, faults=[judgment]).duplicates == {"stale_judgment": 1}
    # Runs well clear of the sweep on either side are not its doing.
    long_after = {"j1": [Run(10, swept + 2.0, swept + 2.1, "ok"), Run(11, swept + 5.0, swept + 5.1, "ok")]}
    assert judge([job()], {"id-1": done(1)}, {}, long_after, faults=[judgment]).duplicates == {"unexplained": 1}
    rerun_long_before = {"j1": [Run(10, swept - 5.0, swept - 4.9, "ok"), Run(11, swept - 2.0, swept - 1.9, "ok")]}
    assert judge([job()], {"id-1": done(1)}, {}, rerun_long_before, faults=[judgment]).duplicates == {"unexplained": 1}


def test_a_live_judgment_of_a_worker_killed_later_still_counts() -> None:
    """Seen on the Redis Cluster chaos run: a sweep judged a live worker stale at :06, its run's outcome was
    fenced and the job ran again; the worker was SIGKILLed at :09. Only sweeps after the kill are the kill's."""
    line = "2026-12-02 17:00:0{s},000 WARNING soniq.worker: stale recovery: workers {ids}; requeued 1 rows"
    logs = [line.format(s=6, ids="host-10-ab, host-11-cd"), line.format(s=9, ids="host-10-ab")]
    first = stale_judgments(logs[:1], faults=[])[0]
    killed = Fault("sigkill", first.at + STALE_LOG_LAG + 1.5, 10)  # between the two sweeps
    judged = stale_judgments(logs, faults=[killed])
    assert [(f.pid, f.at) for f in judged] == [(10, first.at), (11, first.at)]


def test_sigterm_explains_an_interrupted_async_run_but_never_a_sync_one() -> None:
    runs = {"j1": [Run(pid=10, start=1.0), Run(pid=11, start=5.0, end=5.1, outcome="ok")]}
    faults = [Fault("sigterm", 2.0, 10)]
    async_verdict = judge([job("chaos.async")], {"id-1": done()}, {}, runs, faults)
    assert (async_verdict.duplicates, async_verdict.violations) == ({"force_path_cancel": 1}, [])
    sync_verdict = judge([job("chaos.sync")], {"id-1": done()}, {}, runs, faults)
    assert sync_verdict.duplicates == {"unexplained": 1}


def test_a_retry_after_a_failed_run_is_not_a_duplicate() -> None:
    runs = {"j1": [Run(pid=10, start=1.0, end=1.1, outcome="fail"), Run(pid=10, start=2.0, end=2.1, outcome="ok")]}
    verdict = judge([job(fate="flaky")], {"id-1": done(1)}, {}, runs, faults=[])
    assert (dict(verdict.duplicates), verdict.violations) == ({}, [])


def test_wrong_ends_are_violations() -> None:
    ok_run = {"j1": [Run(pid=10, start=1.0, end=1.1, outcome="ok")]}
    lost = judge([job()], {"id-1": None}, {"id-1": None}, ok_run, faults=[])
    assert lost.lost == 1
    stuck = judge([job()], {"id-1": {"status": "processing", "attempts": 0}}, {}, ok_run, faults=[])
    assert stuck.lost == 1
    never_returned = judge([job()], {"id-1": done()}, {}, {"j1": [Run(pid=10, start=1.0)]}, faults=[])
    assert any("no run of its handler returned" in v for v in never_returned.violations)
    failing_done = judge([job(fate="fail")], {"id-1": done()}, {}, ok_run, faults=[])
    assert any("always fails ended done" in v for v in failing_done.violations)
    over_budget = judge([job()], {"id-1": done(MAX_ATTEMPTS + 1)}, {}, ok_run, faults=[])
    assert any("exceed the budget" in v for v in over_budget.violations)
    dead = {
        "attempts": MAX_ATTEMPTS,
        "dead_letter_reason": "worker_lost",
        "last_error": "lost",
        "moved_to_dead_letter_at": None,
    }
    unexplained_loss = judge([job()], {"id-1": None}, {"id-1": dead}, ok_run, faults=[])
    assert any("no fault hit any of its runs" in v for v in unexplained_loss.violations)
    # Killed after its handler returned but before the outcome was written: a run lost with its worker.
    killed_after = judge([job()], {"id-1": None}, {"id-1": dead}, ok_run, faults=[Fault("sigkill", 1.2, 10)])
    assert killed_after.violations == []


def test_the_run_log_pairs_each_end_with_its_own_process_start(tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    log.write_text("S j1 10 1.0\nS j1 11 3.0\nE j1 11 3.5 ok\nE j1 10 1.5 fail\n", encoding="utf-8")
    runs = read_runs(log)["j1"]
    assert [(r.pid, r.start, r.end, r.outcome) for r in runs] == [(10, 1.0, 1.5, "fail"), (11, 3.0, 3.5, "ok")]
