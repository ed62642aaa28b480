"""Producers in other OS processes (spawned) racing to enqueue, for backends shared across processes.

Each child builds its own backend from the pickled factory and the test's namespace, reports
ready, waits for the common start signal so that every producer races, then sends each of its
jobs in a call of its own (all of them at once, on its one backend) and sends back what each
call returned. On a store of its own per instance (``memory://``) the same producers run as
tasks on the test's backend instead (`race_producers`).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
import queue as queue_module
import traceback
from collections.abc import Sequence
from typing import Any

import pytest

from soniq.backend import Backend, EnqueueJobsParams, NewJob
from soniq_contract_tests.harness import BackendFactory

CHILD_DEADLINE_SECONDS = 60.0


async def produce(backend: Backend, jobs: Sequence[NewJob]) -> list[str]:
    """Send each job in an enqueue call of its own, all at once: the id each call returned."""

    async def one(job: NewJob) -> str:
        returned = await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
        if returned is None or len(returned) != 1:
            raise AssertionError(
                f"enqueue_jobs of one job returned {returned!r}; a backend that deduplicates must return "
                "the stored id of every job it was sent"
            )
        return returned[0]

    return list(await asyncio.gather(*(one(job) for job in jobs)))


def produce_in_child(
    factory: BackendFactory, namespace: str, name: str, jobs: list[NewJob], ready: Any, start: Any, results: Any
) -> None:
    announced: list[bool] = []
    try:
        returned = asyncio.run(_produce_when_started(factory, namespace, name, jobs, ready, start, announced))
        results.put((name, "ok", returned))
    except BaseException:
        if not announced:
            ready.put(name)
        results.put((name, "error", traceback.format_exc()))


async def _produce_when_started(
    factory: BackendFactory,
    namespace: str,
    name: str,
    jobs: list[NewJob],
    ready: Any,
    start: Any,
    announced: list[bool],
) -> list[str]:
    backend = factory(namespace)
    await backend.connect()
    try:
        ready.put(name)
        announced.append(True)
        await asyncio.to_thread(start.wait, CHILD_DEADLINE_SECONDS)
        return await produce(backend, jobs)
    finally:
        await backend.close()


async def race_producers(
    factory: BackendFactory, namespace: str, backend: Backend, jobs_per_producer: Sequence[Sequence[NewJob]]
) -> list[list[str]]:
    """Each producer's jobs enqueued at once, the producers racing: the ids each producer got back,
    in its jobs' order. One OS process per producer where the backend is shared across processes,
    else one task per producer on `backend`."""
    if not backend.capabilities.shared_across_processes:
        return list(await asyncio.gather(*(produce(backend, jobs) for jobs in jobs_per_producer)))
    try:
        pickle.dumps(factory)
    except Exception as exc:
        pytest.fail(
            f"soniq_backend_factory returned {factory!r}, which cannot be pickled ({exc}); the backend reports "
            "shared_across_processes=True, so the producer race builds it in other processes: return a "
            "module-level function, a functools.partial or soniq_contract_tests.UrlBackendFactory"
        )
    context = multiprocessing.get_context("spawn")
    ready, start, results = context.Queue(), context.Event(), context.Queue()
    names = [f"producer-{n}" for n in range(len(jobs_per_producer))]
    children = [
        context.Process(
            target=produce_in_child,
            args=(factory, namespace, name, list(jobs), ready, start, results),
            daemon=True,
        )
        for name, jobs in zip(names, jobs_per_producer, strict=True)
    ]
    for child in children:
        child.start()
    returned: dict[str, list[str]] = {}
    try:
        for _ in children:
            try:
                await asyncio.to_thread(ready.get, True, CHILD_DEADLINE_SECONDS)
            except queue_module.Empty:
                raise AssertionError(f"a producer process did not connect within {CHILD_DEADLINE_SECONDS:g}s") from None
        start.set()
        for _ in children:
            try:
                name, outcome, payload = await asyncio.to_thread(results.get, True, CHILD_DEADLINE_SECONDS)
            except queue_module.Empty:
                raise AssertionError(f"a producer process sent no result within {CHILD_DEADLINE_SECONDS:g}s") from None
            if outcome != "ok":
                raise AssertionError(f"producer process {name} failed:\n{payload}")
            returned[name] = payload
    finally:
        start.set()
        for child in children:
            await asyncio.to_thread(child.join, 30)
            if child.is_alive():
                child.kill()
    return [returned[name] for name in names]
