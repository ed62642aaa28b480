"""The shutdown contract end to end: real ``soniq worker`` processes, real signals, real rows.

Both forms run these. Each worker process builds its app from the URL the
`soniq_worker_url` fixture gives (plus the test's namespace as the
`namespace` option), so the store must be one that several processes share
(`capabilities.shared_across_processes`; see `soniq_contract_tests.selection`).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from soniq_contract_tests.harness import BackendFactory, ContractHarness, UrlBackendFactory, fresh_namespace
from soniq_contract_tests.process_harness import Scenario, WorkerProcess, scenarios, wait_for
from soniq_contract_tests.selection import WORKER_PROCESS_MARK, worker_processes_excluded

worker_process = pytest.mark.soniq_worker_process
assert worker_process.name == WORKER_PROCESS_MARK

MISSING_WORKER_URL = (
    "the real-process shutdown scenarios need a URL that a `soniq worker` process can open: override the "
    "fixture soniq_worker_url in {cls} (return the backend URL; the suite adds the test's namespace as the "
    "`namespace` option), or build the backend with soniq_contract_tests.UrlBackendFactory"
)


def utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


class WorkerProcessContract:
    @pytest.fixture
    def soniq_worker_url(self, soniq_backend_factory: BackendFactory) -> str | None:
        """The URL a worker process opens; by default the factory's own when it is a `UrlBackendFactory`."""
        if isinstance(soniq_backend_factory, UrlBackendFactory):
            return soniq_backend_factory.url
        return None

    @pytest.fixture
    def scenario(self, contract: ContractHarness, soniq_worker_url: str | None, tmp_path: Path) -> Iterator[Scenario]:
        probe = contract.factory(fresh_namespace())
        excluded = worker_processes_excluded(probe.capabilities, type(probe).__name__)
        if excluded:
            pytest.skip(excluded)
        if not soniq_worker_url:
            pytest.skip(MISSING_WORKER_URL.format(cls=type(self).__name__))
        factory = contract.factory
        same_url = isinstance(factory, UrlBackendFactory) and factory.url == soniq_worker_url
        options = factory.options if isinstance(factory, UrlBackendFactory) and same_url else {}
        yield from scenarios(soniq_worker_url, options, tmp_path)

    @worker_process
    def test_idle_sigterm_exits_promptly_with_code_zero(self, scenario: Scenario) -> None:
        worker = scenario.start_worker()
        started = time.monotonic()
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit(10) == 0
        assert time.monotonic() - started < 2.0
        assert "RUNNING -> DRAINING" in worker.log()
        assert "DRAINING -> STOPPED" in worker.log()

    @worker_process
    def test_async_force_timeout_nacks_the_row_with_the_seed_field_set(self, scenario: Scenario) -> None:
        job_id = scenario.enqueue("ct.sleep_async", tag="a", seconds=3600)
        worker = scenario.start_worker(SHUTDOWN_TIMEOUT=1)
        wait_for(lambda: scenario.runs("start", "a"), timeout=15, what="the handler to start")
        claimed = scenario.job(job_id)
        assert claimed is not None
        assert claimed["status"] == "processing"
        signalled = worker.signal(signal.SIGTERM)
        assert worker.wait_exit(15) == 0
        elapsed = time.time() - signalled
        assert 1.0 <= elapsed < 1.0 + 5.0
        row = scenario.job(job_id)
        assert row is not None
        assert row["status"] == "queued"
        assert row["worker_id"] is None
        assert row["attempts"] == claimed["attempts"] == 0
        assert row["last_error"] == claimed["last_error"]
        # updated_at and scheduled_at were set by the nack, after the shutdown_timeout ran out.
        assert row["updated_at"] >= utc(signalled + 1.0 - 0.5)
        assert abs((row["scheduled_at"] - row["updated_at"]).total_seconds()) < 1.0
        assert scenario.runs("end", "a") == []
        log = worker.log()
        assert "FORCE_TIMEOUT_PATH" in log
        assert f"job {job_id}" in log
        assert "shutdown_timeout" in log

    @worker_process
    def test_clean_drain_finishes_the_running_job(self, scenario: Scenario) -> None:
        job_id = scenario.enqueue("ct.sleep_async", tag="d", seconds=1.0)
        worker = scenario.start_worker(SHUTDOWN_TIMEOUT=20)
        wait_for(lambda: scenario.runs("start", "d"), timeout=15, what="the handler to start")
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit(15) == 0
        row = scenario.job(job_id)
        assert row is not None
        assert (row["status"], row["result"], row["attempts"]) == ("done", "slept", 0)
        assert "FORCE_TIMEOUT_PATH" not in worker.log()

    @worker_process
    def test_no_claims_while_draining(self, scenario: Scenario) -> None:
        first = scenario.enqueue("ct.sleep_async", tag="first", seconds=1.5)
        worker = scenario.start_worker(SHUTDOWN_TIMEOUT=20, CONCURRENCY=4)
        wait_for(lambda: scenario.runs("start", "first"), timeout=15, what="the first handler to start")
        worker.signal(signal.SIGTERM)
        worker.wait_log("RUNNING -> DRAINING")
        late = scenario.enqueue("ct.sleep_async", tag="late", seconds=0)
        assert worker.wait_exit(15) == 0
        assert (scenario.job(first) or {}).get("status") == "done"
        row = scenario.job(late)
        assert row is not None
        assert (row["status"], row["worker_id"]) == ("queued", None)
        assert scenario.runs("start", "late") == []

    @worker_process
    def test_sync_thread_is_waited_for_past_its_grace_then_marked_done(self, scenario: Scenario) -> None:
        job_id = scenario.enqueue("ct.sleep_sync", tag="s", seconds=3.0)
        worker = scenario.start_worker(SHUTDOWN_TIMEOUT=0.5, SYNC_HANDLER_GRACE_SECONDS=0.5)
        wait_for(lambda: scenario.runs("start", "s"), timeout=15, what="the sync handler to start")
        signalled = worker.signal(signal.SIGTERM)
        worker.wait_log("sync grace of 0.5s expired", timeout=10)
        # Past the grace the row is still ours and still processing: no nack, no force-exit.
        row = scenario.job(job_id)
        assert row is not None
        assert row["status"] == "processing"
        assert worker.popen.poll() is None
        assert worker.wait_exit(20) == 0
        assert time.time() - signalled >= 2.0
        row = scenario.job(job_id)
        assert row is not None
        assert (row["status"], row["result"]) == ("done", "slept")
        log = worker.log()
        assert "FORCE_TIMEOUT_PATH -> WAIT_FOR_THREAD" in log
        assert "WAIT_FOR_THREAD -> STOPPED" in log
        assert "nack'd back to queued" not in log

    @worker_process
    def test_second_sigterm_goes_straight_to_the_force_path(self, scenario: Scenario) -> None:
        job_id = scenario.enqueue("ct.sleep_async", tag="twice", seconds=3600)
        worker = scenario.start_worker(SHUTDOWN_TIMEOUT=60)
        wait_for(lambda: scenario.runs("start", "twice"), timeout=15, what="the handler to start")
        worker.signal(signal.SIGTERM)
        worker.wait_log("RUNNING -> DRAINING")
        second = worker.signal(signal.SIGTERM)
        assert worker.wait_exit(15) == 0
        assert time.time() - second < 5.0
        assert "DRAINING -> FORCE_TIMEOUT_PATH (second signal)" in worker.log()
        row = scenario.job(job_id)
        assert row is not None
        assert (row["status"], row["attempts"]) == ("queued", 0)

    @worker_process
    def test_sigkill_leaves_the_row_processing_and_a_later_process_recovers_and_completes_it(
        self,
        scenario: Scenario,
    ) -> None:
        job_id = scenario.enqueue("ct.block_first_runs_with_retries", tag="k", blocked_runs=1)
        first = scenario.start_worker()
        wait_for(lambda: scenario.runs("start", "k"), timeout=15, what="the handler to start")
        first.signal(signal.SIGKILL)
        assert first.wait_exit(10) == -signal.SIGKILL
        row = scenario.job(job_id)
        assert row is not None
        assert row["status"] == "processing"
        second = scenario.start_worker()
        done = wait_for(
            lambda: (r := scenario.job(job_id)) and r["status"] == "done" and r,
            timeout=30,
            what="recovery and completion",
        )
        # The lost run counts against the budget; the second run finished the job.
        assert done["attempts"] == 1
        assert done["result"] == "finished on run 2"
        assert scenario.runs("start", "k") == [first.popen.pid, second.popen.pid]
        second.signal(signal.SIGTERM)
        assert second.wait_exit(10) == 0

    @worker_process
    def test_a_live_workers_rows_are_never_recovered(self, scenario: Scenario) -> None:
        job_id = scenario.enqueue("ct.sleep_async", tag="live", seconds=3600)
        busy = scenario.start_worker(SHUTDOWN_TIMEOUT=1)
        wait_for(lambda: scenario.runs("start", "live"), timeout=15, what="the handler to start")
        owner = (scenario.job(job_id) or {})["worker_id"]
        sweeper = scenario.start_worker()
        # Sweep for well past heartbeat_timeout (1.5 s): the sweeper's own loop plus explicit `soniq recover` runs.
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            result = scenario.run_cli("recover")
            assert result.returncode == 0, result.stderr
            row = scenario.job(job_id)
            assert row is not None
            assert (row["status"], row["worker_id"], row["attempts"]) == ("processing", owner, 0)
        for worker in (busy, sweeper):
            worker.signal(signal.SIGTERM)
        assert busy.wait_exit(15) == 0
        assert sweeper.wait_exit(15) == 0
        assert scenario.runs("start", "live") == [busy.popen.pid]

    @worker_process
    def test_nacks_cost_no_budget_however_many_shutdowns_abandon_the_job(self, scenario: Scenario) -> None:
        # max_retries=0: a single counted run would dead-letter it. Three forced shutdowns must not.
        job_id = scenario.enqueue("ct.block_first_runs", tag="n", blocked_runs=3)
        for run in range(1, 4):
            worker = scenario.start_worker(SHUTDOWN_TIMEOUT=0.3)

            def reached(wanted: int = run) -> bool:
                return len(scenario.runs("start", "n")) >= wanted

            wait_for(reached, timeout=15, what=f"run {run}")
            worker.signal(signal.SIGTERM)
            assert worker.wait_exit(15) == 0
            row = scenario.job(job_id)
            assert row is not None
            assert (row["status"], row["attempts"]) == ("queued", 0)
        final = scenario.start_worker()
        done = wait_for(
            lambda: (r := scenario.job(job_id)) and r["status"] == "done" and r, timeout=20, what="the 4th run"
        )
        assert (done["attempts"], done["result"]) == (0, "finished on run 4")
        final.signal(signal.SIGTERM)
        assert final.wait_exit(10) == 0

    @worker_process
    def test_a_job_that_kills_its_worker_every_time_ends_in_the_dead_letter_table(self, scenario: Scenario) -> None:
        job_id = scenario.enqueue("ct.kill_my_worker", tag="kamikaze")  # max_retries=1: two counted runs
        workers = []
        for _ in range(3):
            if scenario.dead_letter(job_id):
                break
            worker = scenario.start_worker()
            workers.append(worker)
            # Each process's sweep recovers the row once the previous worker's heartbeat is stale, then runs it.

            def ended(current: WorkerProcess = worker) -> bool:
                return current.popen.poll() is not None or bool(scenario.dead_letter(job_id))

            wait_for(
                ended,
                timeout=30,
                what="the worker to be killed by its job, or the row to be dead-lettered",
            )
        sweeper = workers[-1]
        assert sweeper.popen.poll() is None, "the last worker should have dead-lettered the row instead of running it"
        row = wait_for(lambda: scenario.dead_letter(job_id), timeout=20, what="the dead-letter row")
        assert row["dead_letter_reason"] == "worker_lost"
        assert row["attempts"] == 2
        assert len(scenario.runs("start", "kamikaze")) == 2
        sweeper.signal(signal.SIGTERM)
        assert sweeper.wait_exit(10) == 0

    @worker_process
    def test_prefetched_rows_are_released_untouched_and_running_rows_nacked(self, scenario: Scenario) -> None:
        ids = scenario.enqueue_many("ct.sleep_async", [{"tag": f"p{i}", "seconds": 3600} for i in range(8)])
        worker = scenario.start_worker("--concurrency", "2", PREFETCH=6, SHUTDOWN_TIMEOUT=0.5)

        def claimed() -> bool:
            rows = [scenario.job(i) for i in ids]
            return all(r is not None and r["status"] == "processing" for r in rows)

        wait_for(claimed, timeout=15, what="all 8 rows claimed")
        wait_for(
            lambda: sum(len(scenario.runs("start", f"p{i}")) for i in range(8)) == 2,
            timeout=15,
            what="2 handlers started",
        )
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit(15) == 0
        started = [i for i in range(8) if scenario.runs("start", f"p{i}")]
        assert len(started) == 2
        for job_id in ids:
            row = scenario.job(job_id)
            assert row is not None
            assert (row["status"], row["attempts"], row["worker_id"]) == ("queued", 0, None)
        log = worker.log()
        assert log.count("nack'd back to queued: prefetch_release") == 6
        assert log.count("nack'd back to queued: shutdown_timeout") == 2

    @worker_process
    def test_sigkilled_worker_under_dead_letter_policy_sends_its_running_row_to_review(
        self, scenario: Scenario
    ) -> None:
        ids = scenario.enqueue_many("ct.sleep_async", [{"tag": f"z{i}", "seconds": 3600} for i in range(3)])
        worker = scenario.start_worker("--concurrency", "1", PREFETCH=2, STALE_JOB_POLICY="dead_letter")
        wait_for(
            lambda: all((scenario.job(i) or {}).get("status") == "processing" for i in ids),
            timeout=15,
            what="3 rows claimed",
        )
        running = wait_for(
            lambda: [i for n, i in enumerate(ids) if scenario.runs("start", f"z{n}")],
            timeout=15,
            what="one handler started",
        )
        worker.signal(signal.SIGKILL)
        assert worker.wait_exit(10) == -signal.SIGKILL

        def recovered() -> bool:
            result = scenario.run_cli("recover", STALE_JOB_POLICY="dead_letter")
            assert result.returncode == 0, result.stderr
            return "requeued 2 rows, dead-lettered 1" in result.stdout

        wait_for(recovered, timeout=20, what="the stale sweep", interval=0.3)
        (zombie,) = running
        row = scenario.dead_letter(zombie)
        assert row is not None
        assert row["dead_letter_reason"] == "zombie"
        for job_id in ids:
            if job_id != zombie:
                buffered = scenario.job(job_id)
                assert buffered is not None
                assert (buffered["status"], buffered["attempts"]) == ("queued", 0)
