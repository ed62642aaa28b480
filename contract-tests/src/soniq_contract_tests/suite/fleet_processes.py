"""Issue 19 end to end: fleet-wide limits, cancelling a running job, `wait_for` and dependencies,
with real ``soniq worker`` processes sharing one store.

Like the shutdown scenarios (`worker_processes`), these run only on a store that several
processes share (`soniq_contract_tests.selection`), with the same `scenario` fixture. The
jobs (`soniq_contract_tests.worker_jobs`) report when their handler ran in wall-clock time,
which every process on the machine reads from the same clock; the rows say what the store did.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from soniq import CancelOutcome, JobCall, JobFailedError, Soniq
from soniq_contract_tests.process_harness import Scenario, wait_for
from soniq_contract_tests.suite._fleet import (
    LIMITED,
    claimed_early,
    early_starts,
    epoch,
    max_in_sliding_window,
    max_overlap,
    per_window,
    start_workers,
    stop_workers,
    tracebacks,
)
from soniq_contract_tests.worker_jobs import LIMITED_MAX_CONCURRENT, RATED_PER_SECOND

worker_process = pytest.mark.soniq_worker_process

CLAIM_STAMP_SLACK_SECONDS = 0.005
"""A row's `started_at` may be truncated (a store keeping milliseconds) or stamped as its
transaction began; a claim made early would sit far more than this before its dependency's end."""
WAIT_FOR_WITHIN_SECONDS = 4.0
"""`wait_for` on ten 0.2 s jobs (four at a time): woken by the store's push, or by its poll
(`poll_interval`, 1 s by default, without push), never by a 5 s safety re-read."""
CANCEL_WITHIN_SECONDS = 1.0
"""The issue's bound: a running async job cancelled from another process is `cancelled` within this."""


async def rows_when_all_finished(app: Soniq, count: int, *, timeout: float) -> dict[str, dict[str, Any]]:
    """Every row with its result, once `count` rows are `done` (failing early if any ends otherwise)."""
    deadline = time.monotonic() + timeout
    while True:
        stats = await app.get_queue_stats()
        if stats["done"] >= count:
            break
        if stats["dead_letter"] or stats["cancelled"]:
            raise AssertionError(f"a job did not finish done: {stats}")
        if time.monotonic() > deadline:
            raise AssertionError(f"only {stats['done']} of {count} jobs done after {timeout}s: {stats}")
        await asyncio.sleep(0.1)
    rows = await app.list_jobs(status="done", limit=count + 10, include_results=True)
    assert len(rows) == count, f"{len(rows)} done rows listed, {count} expected"
    return {row["id"]: row for row in rows}


async def finished_row(app: Soniq, job_id: str, *, since: float, timeout: float) -> tuple[dict[str, Any], float]:
    """The row once it has left `processing`, and how long after `since` (monotonic) that was seen."""
    while True:
        row = await app.get_job(job_id)
        assert row is not None, f"job {job_id} vanished"
        elapsed = time.monotonic() - since
        if row["status"] != "processing":
            return row, elapsed
        if elapsed > timeout:
            raise AssertionError(f"job {job_id} still processing {timeout}s after the cancel: {row}")
        await asyncio.sleep(0.005)


class FleetProcessContract:
    # -- fleet-wide limits -------------------------------------------------------------

    @worker_process
    def test_max_concurrent_holds_across_worker_processes_under_load(self, scenario: Scenario) -> None:
        jobs, keyed = 30, 12

        async def enqueue(app: Soniq) -> None:
            await app.enqueue_many("ct.limited", [{"seconds": 0.2}] * jobs)
            # One at a time per customer (a partitioned limit): two customers may run side by side.
            await app.enqueue_many(
                "ct.one_per_customer", [{"customer": f"c{n % 2}", "seconds": 0.2} for n in range(keyed)]
            )

        scenario.run(enqueue, limited=True)
        workers = start_workers(scenario, 3, CONCURRENCY=4, **LIMITED)
        began = time.monotonic()
        rows = scenario.run(lambda app: rows_when_all_finished(app, jobs + keyed, timeout=90), limited=True)
        took = time.monotonic() - began
        stop_workers(workers)
        limited = [row for row in rows.values() if row["job_name"] == "ct.limited"]
        intervals = [(row["result"]["start"], row["result"]["end"]) for row in limited]
        peak = max_overlap(intervals)
        pids = {row["result"]["pid"] for row in limited}
        per_customer = {
            customer: max_overlap(
                (row["result"]["start"], row["result"]["end"])
                for row in rows.values()
                if row["job_name"] == "ct.one_per_customer" and row["args"]["customer"] == customer
            )
            for customer in ("c0", "c1")
        }
        both = max_overlap(
            (row["result"]["start"], row["result"]["end"])
            for row in rows.values()
            if row["job_name"] == "ct.one_per_customer"
        )
        print(
            f"\nFLEET limits: max_concurrent={LIMITED_MAX_CONCURRENT}, {jobs} jobs of 0.2s on 3 workers x 4: "
            f"peak {peak} running at once, {took:.2f}s, run by {len(pids)} process(es); one per customer: "
            f"peaks {per_customer}, {both} across both customers"
        )
        assert peak <= LIMITED_MAX_CONCURRENT, f"{peak} ran at once, limit {LIMITED_MAX_CONCURRENT}: {intervals}"
        # The limit was used, not undercut: two ran together at some point.
        assert peak == LIMITED_MAX_CONCURRENT
        assert per_customer == {"c0": 1, "c1": 1}
        assert both == 2, "each customer is its own group: the two should have run side by side"
        assert {row["limit_key"] for row in rows.values() if row["job_name"] == "ct.one_per_customer"} == {"c0", "c1"}
        assert all(row["attempts"] == 0 for row in rows.values())
        assert not tracebacks(workers)

    @worker_process
    def test_rate_limit_holds_per_window_across_worker_processes(self, scenario: Scenario) -> None:
        jobs = 20
        rate, period = RATED_PER_SECOND, 1.0
        scenario.run(lambda app: app.enqueue_many("ct.rated", [{"n": n} for n in range(jobs)]), limited=True)
        workers = start_workers(scenario, 3, CONCURRENCY=4, **LIMITED)
        rows = scenario.run(lambda app: rows_when_all_finished(app, jobs, timeout=90), limited=True)
        stop_workers(workers)
        # The store's own record of each claim: `started_at` is stamped by the claim, on the store's clock.
        claims = [epoch(row["started_at"]) for row in rows.values()]
        windows = per_window(claims, period)
        sliding = {k: max_in_sliding_window(claims, k * period) for k in (1, 2, 3)}
        print(
            f"\nFLEET rate: {rate}/{period:g}s, {jobs} jobs on 3 workers x 4: claims per window "
            f"{[windows[w] for w in sorted(windows)]}, most claims within 1/2/3 periods {list(sliding.values())}"
        )
        assert max(windows.values()) <= rate, f"more than {rate} claims in one window: {dict(windows)}"
        # Over any stretch of k periods, at most k + 1 periods' worth: the rate within one period's tolerance.
        for k, most in sliding.items():
            assert most <= (k + 1) * rate, f"{most} claims within {k * period:g}s at {rate}/{period:g}s"
        assert len(windows) >= jobs // rate, f"{jobs} jobs at {rate} per window fit in {len(windows)} windows"
        # And the rate was used: the work took about jobs/rate windows, not many more.
        span = max(windows) - min(windows) + 1
        assert span <= jobs // rate + 3, f"{jobs} jobs at {rate}/{period:g}s spread over {span} windows"
        # Each handler ran after its claim (the stamps are claims, not enqueues; one host, one clock).
        late = [row["id"] for row in rows.values() if row["result"]["start"] + 0.005 < epoch(row["started_at"])]
        assert late == [], f"handlers that started before their row's claim stamp: {late}"
        assert not tracebacks(workers)

    # -- cancelling a running job ----------------------------------------------------------

    @worker_process
    def test_a_running_async_job_cancelled_from_another_process_ends_cancelled_within_a_second(
        self, scenario: Scenario
    ) -> None:
        (worker,) = start_workers(scenario, 1, CONCURRENCY=2)
        job_id = scenario.enqueue("ct.cancellable_async", tag="a")
        wait_for(lambda: scenario.runs("start", "a"), timeout=20, what="the handler to start")

        async def cancel(app: Soniq) -> tuple[dict[str, Any], dict[str, Any], float]:
            before = await app.get_job(job_id)
            assert before is not None
            assert before["status"] == "processing", before
            began = time.monotonic()
            assert await app.cancel(job_id) is CancelOutcome.REQUESTED
            row, elapsed = await finished_row(app, job_id, since=began, timeout=15)
            return before, row, elapsed

        before, row, elapsed = scenario.run(cancel)
        print(f"\nFLEET cancel (async): cancelled {elapsed * 1000:.0f} ms after app.cancel")
        assert row["status"] == "cancelled", row
        assert row["attempts"] == before["attempts"] == 0
        assert row["worker_id"] is None
        assert row["cancel_requested"] is True
        assert "cancelled by request" in (row["last_error"] or "")
        assert elapsed < CANCEL_WITHIN_SECONDS, f"the row was cancelled {elapsed:.3f}s after the request"
        # The handler was really stopped (its CancelledError handler ran), in its own worker.
        assert scenario.runs("unwound", "a") == [worker.popen.pid]
        # And the worker goes on: the next job runs there and completes.
        after = scenario.enqueue("ct.sleep_async", tag="after", seconds=0)
        wait_for(lambda: (scenario.job(after) or {}).get("status") == "done", timeout=20, what="the next job")
        assert scenario.runs("start", "after") == [worker.popen.pid]
        assert worker.popen.poll() is None
        assert not tracebacks([worker])
        stop_workers([worker])

    @worker_process
    def test_a_sync_job_polling_cancel_requested_ends_cancelled(self, scenario: Scenario) -> None:
        (worker,) = start_workers(scenario, 1, CONCURRENCY=2)
        job_id = scenario.enqueue("ct.cancellable_sync", tag="s")
        wait_for(lambda: scenario.runs("start", "s"), timeout=20, what="the sync handler to start")

        async def cancel(app: Soniq) -> tuple[dict[str, Any], float]:
            began = time.monotonic()
            assert await app.cancel(job_id) is CancelOutcome.REQUESTED
            return await finished_row(app, job_id, since=began, timeout=15)

        row, elapsed = scenario.run(cancel)
        print(f"\nFLEET cancel (sync): cancelled {elapsed * 1000:.0f} ms after app.cancel")
        assert (row["status"], row["attempts"], row["worker_id"]) == ("cancelled", 0, None)
        assert "sync handler returned" in (row["last_error"] or ""), row["last_error"]
        # The handler saw ctx.cancel_requested and returned: it did not give up on its own.
        assert scenario.runs("saw_cancel", "s") == [worker.popen.pid]
        assert scenario.runs("gave_up", "s") == []
        assert elapsed < CANCEL_WITHIN_SECONDS, f"the row was cancelled {elapsed:.3f}s after the request"
        assert not tracebacks([worker])
        stop_workers([worker])

    # -- waiting for a result -----------------------------------------------------------------

    @worker_process
    def test_wait_for_returns_results_and_raises_failures_across_processes(self, scenario: Scenario) -> None:
        (worker,) = start_workers(scenario, 1, CONCURRENCY=4)

        async def wait(app: Soniq) -> tuple[list[Any], JobFailedError, float]:
            ids = [await app.enqueue("ct.answer", value=n, delay=0.2) for n in range(10)]
            failing = await app.enqueue("ct.fail_now", message="boom", delay=0.2)
            began = time.monotonic()
            results = await asyncio.gather(*(app.wait_for(job_id, timeout=30) for job_id in ids))
            took = time.monotonic() - began
            with pytest.raises(JobFailedError) as failed:
                await app.wait_for(failing, timeout=30)
            return list(results), failed.value, took

        results, error, took = scenario.run(wait)
        print(f"\nFLEET wait_for: 10 results waited for together in {took:.2f}s")
        assert results == [n * 2 for n in range(10)]
        # About 0.6 s of work (three rounds of four 0.2 s jobs): a waiter that only noticed a finished
        # job at its periodic re-read (core's SAFETY_REREAD_SECONDS, 5 s) missed the store's wake-up.
        assert took < WAIT_FOR_WITHIN_SECONDS, f"10 waits took {took:.2f}s: a finished job's change was missed"
        assert "boom" in (error.last_error or "")
        assert error.job["dead_letter_reason"] == "max_attempts"
        assert not tracebacks([worker])
        stop_workers([worker])

    # -- dependencies --------------------------------------------------------------------------

    @worker_process
    def test_a_graph_of_1000_jobs_completes_in_order_across_worker_processes(self, scenario: Scenario) -> None:
        workers = start_workers(scenario, 3, CONCURRENCY=4)

        async def build(app: Soniq) -> list[str]:
            """4 chains of 100; one root fanning out to 300 jobs that fan in to one join; 298 jobs
            that each wait for the join and the end of a chain. 1,000 jobs in all."""
            ids: list[str] = []
            tails = []
            for _ in range(4):
                chain = await app.chain(*(JobCall("ct.step", {"seconds": 0.002}) for _ in range(100)))
                ids += chain
                tails.append(chain[-1])
            root = await app.enqueue("ct.step", seconds=0.01)
            fanned = await app.enqueue_many("ct.step", [{"seconds": 0.002}] * 300, depends_on=[root])
            join = await app.enqueue("ct.step", depends_on=fanned)
            ids += [root, *fanned, join]
            for n, tail in enumerate(tails):
                count = 75 if n < 2 else 74
                ids += await app.enqueue_many("ct.step", [{}] * count, depends_on=[join, tail])
            return ids

        began = time.monotonic()
        ids = scenario.run(build)
        assert len(ids) == len(set(ids)) == 1000
        rows = scenario.run(lambda app: rows_when_all_finished(app, 1000, timeout=100))
        took = time.monotonic() - began
        stop_workers(workers)
        assert set(rows) == set(ids)
        pids = {row["result"]["pid"] for row in rows.values()}
        edges = sum(len(row["depends_on"]) for row in rows.values())
        print(f"\nFLEET dependencies: 1000 jobs, {edges} edges, done in {took:.1f}s by {len(pids)} processes")
        assert edges == 4 * 99 + 300 + 300 + 298 * 2
        assert all(row["waiting_on"] == 0 and row["attempts"] == 0 for row in rows.values())
        # No handler started before every one of its dependencies' handlers had returned ...
        assert early_starts(rows, slack=0.0) == []
        # ... and the store stamped no claim before that either (within a store's timestamp precision).
        assert claimed_early(rows, slack=CLAIM_STAMP_SLACK_SECONDS) == []
        assert not tracebacks(workers)
