"""Claimers in other OS processes (spawned), for backends shared across processes.

Each child builds its own backend with the pickled factory and the test's
namespace, reports ready, waits for the common start signal so that all
claimers race, then claims until the queue is empty and sends back every id
it received.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import pickle
import queue as queue_module
import traceback
from collections.abc import AsyncIterator
from typing import Any

import pytest

from soniq.backend import ClaimJobsParams
from soniq_contract_tests.harness import BackendFactory

CHILD_DEADLINE_SECONDS = 60.0


def claim_in_child(
    factory: BackendFactory, namespace: str, worker_id: str, queue: str, ready: Any, start: Any, results: Any
) -> None:
    announced: list[bool] = []
    try:
        claimed = asyncio.run(_claim_all(factory, namespace, worker_id, queue, ready, start, announced))
        results.put((worker_id, "ok", claimed))
    except BaseException:
        if not announced:
            ready.put(worker_id)
        results.put((worker_id, "error", traceback.format_exc()))


async def _claim_all(
    factory: BackendFactory, namespace: str, worker_id: str, queue: str, ready: Any, start: Any, announced: list[bool]
) -> list[str]:
    backend = factory(namespace)
    await backend.connect()
    try:
        ready.put(worker_id)
        announced.append(True)
        await asyncio.to_thread(start.wait, CHILD_DEADLINE_SECONDS)
        claimed: list[str] = []
        while True:
            rows = await backend.claim_jobs(
                ClaimJobsParams(worker_id=worker_id, queues=[queue], limit=2, mark_started=False)
            )
            if not rows:
                return claimed
            claimed.extend(row.id for row in rows)
    finally:
        await backend.close()


class ClaimerProcesses:
    def __init__(self, start: Any, results: Any, count: int) -> None:
        self._start = start
        self._results = results
        self._count = count

    def go(self) -> None:
        self._start.set()

    async def collect(self) -> list[tuple[str, list[str]]]:
        """(worker id, claimed ids) from every child; a child's traceback fails the test."""
        collected: list[tuple[str, list[str]]] = []
        for _ in range(self._count):
            try:
                worker_id, outcome, payload = await asyncio.to_thread(self._results.get, True, CHILD_DEADLINE_SECONDS)
            except queue_module.Empty:
                raise AssertionError(f"a claimer process sent no result within {CHILD_DEADLINE_SECONDS:g}s") from None
            if outcome != "ok":
                raise AssertionError(f"claimer process {worker_id} failed:\n{payload}")
            collected.append((worker_id, payload))
        return collected


@contextlib.asynccontextmanager
async def started_claimer_processes(
    factory: BackendFactory, namespace: str, queue: str, *, count: int
) -> AsyncIterator[ClaimerProcesses]:
    try:
        pickle.dumps(factory)
    except Exception as exc:
        pytest.fail(
            f"soniq_backend_factory returned {factory!r}, which cannot be pickled ({exc}); the backend reports "
            "shared_across_processes=True, so the claim test builds it in other processes: return a "
            "module-level function, a functools.partial or soniq_contract_tests.UrlBackendFactory"
        )
    context = multiprocessing.get_context("spawn")
    ready, start, results = context.Queue(), context.Event(), context.Queue()
    processes = [
        context.Process(
            target=claim_in_child,
            args=(factory, namespace, f"process-{n}", queue, ready, start, results),
            daemon=True,
        )
        for n in range(count)
    ]
    for process in processes:
        process.start()
    try:
        for _ in processes:
            try:
                await asyncio.to_thread(ready.get, True, CHILD_DEADLINE_SECONDS)
            except queue_module.Empty:
                raise AssertionError(f"a claimer process did not connect within {CHILD_DEADLINE_SECONDS:g}s") from None
        yield ClaimerProcesses(start, results, count)
    finally:
        start.set()
        for process in processes:
            await asyncio.to_thread(process.join, 30)
            if process.is_alive():
                process.kill()
