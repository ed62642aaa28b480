"""A separate OS process for the cross-process tests (run as a script, not collected).

Usage: python claimer_process.py claim URL WORKER_ID  -> claims and completes until the queue is empty
       python claimer_process.py limited URL WORKER_ID MAX -> the same with max_concurrent=MAX on the
                                                        job name, holding each claimed row for a moment
       python claimer_process.py setup URL            -> runs setup()
It prints "ready", waits for a line on stdin, does its work, then prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys

from soniq.params import ClaimJobsParams, CompleteJobsParams, GroupLimit, JobResult, LimitScope, QueueStatsParams
from soniq_sqlite import SQLiteBackend


async def claim_all(url: str, worker_id: str, max_concurrent: int | None = None) -> dict[str, object]:
    backend = SQLiteBackend.from_url(url)
    limits = () if max_concurrent is None else (GroupLimit(LimitScope.JOB, "tests.noop", max_concurrent),)
    await backend.connect()
    print("ready", flush=True)
    sys.stdin.readline()
    claimed: list[str] = []
    lost: list[str] = []
    try:
        while True:
            rows = await backend.claim_jobs(
                ClaimJobsParams(
                    worker_id=worker_id, queues=None, limit=random.randint(1, 8), mark_started=True, limits=limits
                )
            )
            if not rows:
                stats = await backend.queue_stats(QueueStatsParams())
                if stats.queued == 0:
                    break
                if limits:
                    await asyncio.sleep(0.002)
                continue
            claimed.extend(row.id for row in rows)
            if limits:
                await asyncio.sleep(0.01)  # hold the slots a moment, as a handler would
            written = await backend.complete_jobs(
                CompleteJobsParams(worker_id=worker_id, results=[JobResult(row.id, None) for row in rows])
            )
            lost.extend(row.id for row in rows if row.id not in written)
    finally:
        await backend.close()
    return {"claimed": claimed, "lost": lost}


async def setup_only(url: str) -> dict[str, object]:
    backend = SQLiteBackend.from_url(url)
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        await backend.setup()
        stats = await backend.queue_stats(QueueStatsParams())
    finally:
        await backend.close()
    return {"total": stats.total}


def main() -> None:
    command, url = sys.argv[1], sys.argv[2]
    if command == "claim":
        work = claim_all(url, sys.argv[3])
    elif command == "limited":
        work = claim_all(url, sys.argv[3], int(sys.argv[4]))
    else:
        work = setup_only(url)
    outcome = asyncio.run(work)
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
