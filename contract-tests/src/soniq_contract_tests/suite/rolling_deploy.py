"""A rolling deploy end to end: an old worker without a new job's code beside a new worker that has it.

Real ``soniq worker`` processes on the backend under test: the
old one is started with ``ct.new_job`` left out of its jobs module (see
`soniq_contract_tests.worker_jobs`). It must never claim that name, so
nothing is lost and nothing dead-lettered; when it is stopped mid-job, its
row ends as the shutdown contract says (nack'd back to queued, attempts
unchanged) and the new worker finishes it.
"""

from __future__ import annotations

import signal
from typing import Any

from soniq import Soniq
from soniq_contract_tests.process_harness import Scenario, WorkerProcess, wait_for
from soniq_contract_tests.suite.worker_processes import worker_process

OLD_RELEASE = {"CT_WITHOUT": "ct.new_job"}


def _pid_of(worker_id: str | None) -> int | None:
    """Worker ids are ``hostname-pid-suffix``."""
    parts = (worker_id or "").rsplit("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def _rows(scenario: Scenario, ids: list[str]) -> list[dict[str, Any] | None]:
    async def body(app: Soniq) -> list[dict[str, Any] | None]:
        return [await app.get_job(job_id) for job_id in ids]

    rows: list[dict[str, Any] | None] = scenario.run(body)
    return rows


def _stats(scenario: Scenario) -> dict[str, int]:
    async def body(app: Soniq) -> dict[str, int]:
        return await app.get_queue_stats()

    stats: dict[str, int] = scenario.run(body)
    return stats


def _all_done(scenario: Scenario, ids: list[str]) -> bool:
    return all(row is not None and row["status"] == "done" for row in _rows(scenario, ids))


def _check_ran_only_on(scenario: Scenario, ids: list[str], tags: list[str], worker: WorkerProcess) -> None:
    for row, tag in zip(_rows(scenario, ids), tags, strict=True):
        assert row is not None
        assert (row["status"], row["attempts"], row["result"]) == ("done", 0, "new"), row
        assert scenario.runs("start", tag) == [worker.popen.pid], f"{tag} ran in {scenario.runs('start', tag)}"
        if row["worker_id"] is not None:
            assert _pid_of(row["worker_id"]) == worker.popen.pid, row


class RollingDeployContract:
    @worker_process
    def test_rolling_deploy_loses_nothing_and_old_workers_never_claim_new_names(self, scenario: Scenario) -> None:
        old = scenario.start_worker(SHUTDOWN_TIMEOUT=1, **OLD_RELEASE)
        # A long old job, running on the old worker when it is told to stop (its first run blocks for good).
        long_id = scenario.enqueue("ct.block_first_runs_with_retries", tag="long", blocked_runs=1)
        wait_for(lambda: scenario.runs("start", "long"), timeout=15, what="the long job on the old worker")
        assert scenario.runs("start", "long") == [old.popen.pid]

        # New names first, then old ones: the old worker takes the old jobs and leaves the new ones alone.
        new_tags = [f"new{i}" for i in range(10)]
        new_ids = scenario.enqueue_many("ct.new_job", [{"tag": tag} for tag in new_tags])
        old_ids = scenario.enqueue_many("ct.sleep_async", [{"tag": f"old{i}", "seconds": 0} for i in range(10)])
        wait_for(lambda: _all_done(scenario, old_ids), timeout=30, what="the old jobs done by the old worker")
        for row in _rows(scenario, new_ids):
            assert row is not None
            assert (row["status"], row["attempts"], row["worker_id"]) == ("queued", 0, None), row
        assert all(not scenario.runs("start", tag) for tag in new_tags)

        # The new release starts beside it: the new names are served, and a mix runs on both.
        new = scenario.start_worker()
        wait_for(lambda: _all_done(scenario, new_ids), timeout=30, what="the new jobs done by the new worker")
        _check_ran_only_on(scenario, new_ids, new_tags, new)
        mixed_tags = [f"mixed-new{i}" for i in range(10)]
        mixed_new = scenario.enqueue_many("ct.new_job", [{"tag": tag} for tag in mixed_tags])
        mixed_old = scenario.enqueue_many(
            "ct.sleep_async", [{"tag": f"mixed-old{i}", "seconds": 0.05} for i in range(20)]
        )
        wait_for(lambda: _all_done(scenario, mixed_new + mixed_old), timeout=30, what="the mixed load done")
        _check_ran_only_on(scenario, mixed_new, mixed_tags, new)

        # The old worker is stopped mid-job: the row is nack'd untouched and the new worker finishes it.
        old.signal(signal.SIGTERM)
        assert old.wait_exit(15) == 0
        assert f"job {long_id}" in old.log()
        assert "nack'd back to queued" in old.log()
        done = wait_for(
            lambda: (r := scenario.job(long_id)) and r["status"] == "done" and r,
            timeout=30,
            what="the long job finished by the new worker",
        )
        assert (done["attempts"], done["result"]) == (0, "finished on run 2")
        assert scenario.runs("start", "long") == [old.popen.pid, new.popen.pid]

        # Never claimed, not even to hand back: the old worker's log names none of the new rows.
        old_log = old.log()
        assert "handed back untouched" not in old_log
        assert not [job_id for job_id in new_ids + mixed_new if job_id in old_log]

        stats = _stats(scenario)
        total = 1 + len(new_ids) + len(old_ids) + len(mixed_new) + len(mixed_old)
        assert stats == {
            "total": total,
            "queued": 0,
            "processing": 0,
            "done": total,
            "dead_letter": 0,
            "cancelled": 0,
        }, stats
        new.signal(signal.SIGTERM)
        assert new.wait_exit(15) == 0
