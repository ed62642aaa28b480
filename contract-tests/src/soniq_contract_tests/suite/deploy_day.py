"""Deploy day end to end: real ``soniq worker`` processes of an old and a new release, real signals.

Three scenarios, each on the backend under test (a store several processes share) and each
needing one of this round's roles:

- resumable steps (`JobStepStore`): a job of three ``ctx.step``s is cut off by a SIGTERM during
  its second step on the old worker, nack'd back, and the new worker finishes it without running
  its first step again;
- job versions (`VersionedJobs`): an old worker running ``ct.versioned`` at version 1 beside a new
  one at version 2 (with an upgrade from 1): rows the new code enqueues are never claimed by the
  old worker, old rows run on either (upgraded on the new one), nothing is dead-lettered;
- a queue paused for the deploy (`QueuePauseStore`): paused with ``soniq queue pause``, its
  backlog stays queued (attempts 0) while the old worker is stopped and the new one started, and
  drains once ``soniq queue resume`` lifts the pause.

What ran, and in which process, is read from the run log the jobs write
(`soniq_contract_tests.worker_jobs`) and from the rows; every wait is on a condition.
"""

from __future__ import annotations

import signal
from typing import Any

from soniq import Soniq
from soniq_contract_tests.process_harness import Scenario, WorkerProcess, wait_for
from soniq_contract_tests.suite.worker_processes import worker_process

OLD = {"CT_RELEASE": "old"}
"""The settings that start a worker of the old release (see `soniq_contract_tests.worker_jobs`)."""

DEPLOY_QUEUE = "ct-deploy"
OTHER_QUEUE = "ct-other"


def _rows(scenario: Scenario, ids: list[str]) -> list[dict[str, Any]]:
    async def body(app: Soniq) -> list[dict[str, Any] | None]:
        return [await app.get_job(job_id) for job_id in ids]

    rows: list[dict[str, Any] | None] = scenario.run(body)
    missing = [job_id for job_id, row in zip(ids, rows, strict=True) if row is None]
    assert not missing, f"rows not found: {missing}"
    return [row for row in rows if row is not None]


def _all_done(scenario: Scenario, ids: list[str]) -> bool:
    return all(row["status"] == "done" for row in _rows(scenario, ids))


def _stats(scenario: Scenario) -> dict[str, int]:
    async def body(app: Soniq) -> dict[str, int]:
        return await app.get_queue_stats()

    stats: dict[str, int] = scenario.run(body)
    return stats


def _enqueue(scenario: Scenario, name: str, items: list[dict[str, Any]], **options: Any) -> list[str]:
    """Enqueue through an app of the release named in `options` (``release="old"``), on `queue` if given."""
    queue = options.pop("queue", None)

    async def body(app: Soniq) -> list[str]:
        return await app.enqueue_many(name, items, queue=queue)

    ids: list[str] = scenario.run(body, **options)
    return ids


def _stop(worker: WorkerProcess) -> None:
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(20) == 0, worker.log()[-4000:]


def _nothing_lost(scenario: Scenario, total: int) -> None:
    stats = _stats(scenario)
    assert stats == {
        "total": total,
        "queued": 0,
        "processing": 0,
        "done": total,
        "dead_letter": 0,
        "cancelled": 0,
    }, stats


def _cli(scenario: Scenario, *args: str) -> str:
    done = scenario.run_cli(*args)
    assert done.returncode == 0, f"soniq {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


class DeployDayContract:
    @worker_process
    def test_a_sigterm_mid_step_resumes_on_a_new_worker_without_rerunning_done_steps(self, scenario: Scenario) -> None:
        old = scenario.start_worker(SHUTDOWN_TIMEOUT=1, **OLD)
        (job_id,) = _enqueue(scenario, "ct.three_steps", [{"tag": "steps"}])
        wait_for(lambda: scenario.runs("step-two", "steps"), timeout=20, what="step two on the old worker")
        assert scenario.runs("step-one", "steps") == [old.popen.pid]
        row = scenario.job(job_id)
        assert row is not None
        assert row["status"] == "processing"
        assert row["steps"] == {"one": f"one@{old.popen.pid}"}, row["steps"]

        _stop(old)
        assert "nack'd back to queued" in old.log()
        nacked = scenario.job(job_id)
        assert nacked is not None
        assert (nacked["status"], nacked["attempts"], nacked["worker_id"]) == ("queued", 0, None), nacked
        assert nacked["shutdown_nacks"] == 1, nacked
        assert nacked["steps"] == {"one": f"one@{old.popen.pid}"}, "the nack kept the completed step"

        new = scenario.start_worker()
        done = wait_for(
            lambda: (r := scenario.job(job_id)) and r["status"] == "done" and r,
            timeout=30,
            what="the job finished by the new worker",
        )
        pids = (old.popen.pid, new.popen.pid)
        assert done["result"] == [f"one@{pids[0]}", f"two@{pids[1]}", f"three@{pids[1]}"], done["result"]
        assert done["attempts"] == 0, done
        assert scenario.runs("step-one", "steps") == [pids[0]], "step one ran again after the SIGTERM"
        assert scenario.runs("step-two", "steps") == list(pids), "step two runs again: it never completed"
        assert scenario.runs("step-three", "steps") == [pids[1]]
        assert scenario.runs("start", "steps") == list(pids)
        _nothing_lost(scenario, 1)
        _stop(new)

    @worker_process
    def test_old_and_new_versions_of_a_job_share_the_fleet_during_a_deploy(self, scenario: Scenario) -> None:
        old = scenario.start_worker(**OLD)
        # The new release's producers ship first: their rows (version 2) wait for a worker with that code.
        new_tags = [f"v2-{i}" for i in range(8)]
        new_ids = _enqueue(scenario, "ct.versioned", [{"tag": tag, "cents": 250 + i} for i, tag in enumerate(new_tags)])
        old_tags = [f"v1-{i}" for i in range(8)]
        old_ids = _enqueue(
            scenario, "ct.versioned", [{"tag": tag, "amount": i} for i, tag in enumerate(old_tags)], release="old"
        )
        assert {row["version"] for row in _rows(scenario, new_ids)} == {2}
        assert {row["version"] for row in _rows(scenario, old_ids)} == {1}
        wait_for(lambda: _all_done(scenario, old_ids), timeout=30, what="the version-1 rows done by the old worker")
        for row in _rows(scenario, old_ids):
            assert row["result"] == {"version": 1, "amount": row["args"]["amount"], "pid": old.popen.pid}, row
        for row in _rows(scenario, new_ids):
            assert (row["status"], row["attempts"], row["worker_id"]) == ("queued", 0, None), row
        assert not [tag for tag in new_tags if scenario.runs("start", tag)], "the old worker ran version-2 rows"

        # The new release's workers start beside the old one: version 2 is served, mixed load runs on both.
        new = scenario.start_worker()
        wait_for(lambda: _all_done(scenario, new_ids), timeout=30, what="the version-2 rows done by the new worker")
        mixed_new_tags = [f"mixed-v2-{i}" for i in range(10)]
        mixed_new = _enqueue(scenario, "ct.versioned", [{"tag": tag, "cents": 7} for tag in mixed_new_tags])
        mixed_old_tags = [f"mixed-v1-{i}" for i in range(10)]
        mixed_old = _enqueue(
            scenario, "ct.versioned", [{"tag": tag, "amount": 3} for tag in mixed_old_tags], release="old"
        )
        wait_for(lambda: _all_done(scenario, mixed_new + mixed_old), timeout=30, what="the mixed load done")

        # The old worker goes; version-1 rows still queued by old producers are upgraded by the new one.
        _stop(old)
        late_tags = [f"late-v1-{i}" for i in range(5)]
        late_old = _enqueue(scenario, "ct.versioned", [{"tag": tag, "amount": 4} for tag in late_tags], release="old")
        wait_for(lambda: _all_done(scenario, late_old), timeout=30, what="late version-1 rows upgraded and done")

        for tag in new_tags + mixed_new_tags:
            assert scenario.runs("start", tag) == [new.popen.pid], (
                f"{tag} (version 2) ran in {scenario.runs('start', tag)}"
            )
        for row in _rows(scenario, new_ids + mixed_new):
            assert (row["result"]["version"], row["result"]["pid"]) == (2, new.popen.pid), row
        for row in _rows(scenario, mixed_old + late_old):
            amount = 3 if row["id"] in mixed_old else 4
            ran_old = {"version": 1, "amount": amount, "pid": old.popen.pid}
            upgraded = {"version": 2, "cents": amount * 100, "pid": new.popen.pid}
            if row["id"] in late_old:
                assert row["result"] == upgraded, f"a late version-1 row was not upgraded on the new worker: {row}"
            else:
                assert row["result"] in (ran_old, upgraded), row
        old_log = old.log()
        assert not [job_id for job_id in new_ids + mixed_new if job_id in old_log], "the old worker touched v2 rows"
        assert "handed back untouched" not in old_log
        total = len(new_ids) + len(old_ids) + len(mixed_new) + len(mixed_old) + len(late_old)
        _nothing_lost(scenario, total)
        _stop(new)

    @worker_process
    def test_a_queue_paused_for_a_deploy_holds_its_backlog_until_resumed(self, scenario: Scenario) -> None:
        old = scenario.start_worker(SHUTDOWN_TIMEOUT=5)
        # A job of the queue is running on the old worker when the deploy starts: it runs to its end.
        (running,) = _enqueue(scenario, "ct.sleep_async", [{"tag": "running", "seconds": 1.0}], queue=DEPLOY_QUEUE)
        wait_for(lambda: scenario.runs("start", "running"), timeout=20, what="the running job on the old worker")

        assert "paused queue ct-deploy" in _cli(scenario, "queue", "pause", DEPLOY_QUEUE, "--reason", "deploy 42")
        listed = _cli(scenario, "queue", "list")
        assert f"{DEPLOY_QUEUE}  paused since" in listed, listed
        assert "reason: deploy 42" in listed, listed
        old.wait_log(f"queue {DEPLOY_QUEUE} paused (reason: deploy 42)", timeout=10)

        backlog_tags = [f"held-{i}" for i in range(10)]
        backlog = _enqueue(
            scenario, "ct.sleep_async", [{"tag": tag, "seconds": 0} for tag in backlog_tags], queue=DEPLOY_QUEUE
        )
        others = _enqueue(
            scenario, "ct.sleep_async", [{"tag": f"o{i}", "seconds": 0} for i in range(5)], queue=OTHER_QUEUE
        )
        wait_for(lambda: _all_done(scenario, others), timeout=30, what="the other queue served by the old worker")
        wait_for(lambda: _all_done(scenario, [running]), timeout=30, what="the running job finished despite the pause")

        _stop(old)
        new = scenario.start_worker()
        more = _enqueue(
            scenario, "ct.sleep_async", [{"tag": f"p{i}", "seconds": 0} for i in range(5)], queue=OTHER_QUEUE
        )
        wait_for(lambda: _all_done(scenario, more), timeout=30, what="the other queue served by the new worker")
        for row in _rows(scenario, backlog):
            assert (row["status"], row["attempts"], row["worker_id"]) == ("queued", 0, None), row
        assert not [tag for tag in backlog_tags if scenario.runs("start", tag)], "a paused queue's row ran"
        assert DEPLOY_QUEUE in _cli(scenario, "queue", "list")

        assert "resumed queue ct-deploy" in _cli(scenario, "queue", "resume", DEPLOY_QUEUE)
        assert "no paused queues" in _cli(scenario, "queue", "list")
        wait_for(lambda: _all_done(scenario, backlog), timeout=30, what="the backlog drained after the resume")
        for tag in backlog_tags:
            assert scenario.runs("start", tag) == [new.popen.pid], f"{tag} ran in {scenario.runs('start', tag)}"
        _nothing_lost(scenario, 1 + len(backlog) + len(others) + len(more))
        _stop(new)
