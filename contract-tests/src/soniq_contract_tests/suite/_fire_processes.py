"""Schedulers in other OS processes (spawned) racing to fire one schedule, for backends shared across processes.

Each child builds its own backend from the pickled factory, waits for the
common start signal, then loops: read the schedule, fire its current due time
(one job whose `scheduled_at` is that due time), until the schedule has fired
`due_times` times. It sends back the due times it won.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
import queue as queue_module
import traceback
import uuid
from datetime import timedelta
from typing import Any

import pytest

from soniq.backend import Backend, FireScheduleParams, GetScheduleParams, NewJob
from soniq_contract_tests.harness import BackendFactory, utc_now

CHILD_DEADLINE_SECONDS = 60.0
STEP = timedelta(minutes=1)


def fire_in_child(
    factory: BackendFactory, namespace: str, name: str, due_times: int, ready: Any, start: Any, results: Any
) -> None:
    try:
        won = asyncio.run(_fire_until_done(factory, namespace, name, due_times, ready, start))
        results.put(("ok", won))
    except BaseException:
        ready.put("failed")
        results.put(("error", traceback.format_exc()))


async def _fire_until_done(
    factory: BackendFactory, namespace: str, name: str, due_times: int, ready: Any, start: Any
) -> list[str]:
    backend = factory(namespace)
    await backend.connect()
    try:
        ready.put("ready")
        await asyncio.to_thread(start.wait, CHILD_DEADLINE_SECONDS)
        return await fire_until_done(backend, name, due_times)
    finally:
        await backend.close()


async def fire_until_done(backend: Backend, name: str, due_times: int) -> list[str]:
    """One scheduler's loop: fire the schedule's current due time until it has fired `due_times` times."""
    won: list[str] = []
    while True:
        row = await backend.get_schedule(GetScheduleParams(name=name))
        if row is None:
            raise AssertionError(f"schedule {name!r} vanished during the race")
        if row.run_count >= due_times:
            return won
        job = NewJob(
            id=str(uuid.uuid4()),
            job_name=row.job_name,
            args={},
            queue=row.queue,
            priority=row.priority,
            scheduled_at=row.next_run,
            max_attempts=row.max_attempts,
        )
        fired = await backend.fire_schedule(
            FireScheduleParams(
                name=name,
                expected_next_run=row.next_run,
                new_next_run=row.next_run + STEP,
                jobs=[job],
                fired_at=utc_now(),
            )
        )
        if fired is not None:
            won.append(row.next_run.isoformat())


async def race_in_processes(
    factory: BackendFactory, namespace: str, name: str, *, due_times: int, processes: int
) -> list[str]:
    """Every due time each child won, all children together."""
    try:
        pickle.dumps(factory)
    except Exception as exc:
        pytest.fail(
            f"soniq_backend_factory returned {factory!r}, which cannot be pickled ({exc}); the backend reports "
            "shared_across_processes=True, so the firing test builds it in other processes: return a "
            "module-level function, a functools.partial or soniq_contract_tests.UrlBackendFactory"
        )
    context = multiprocessing.get_context("spawn")
    ready, start, results = context.Queue(), context.Event(), context.Queue()
    children = [
        context.Process(
            target=fire_in_child, args=(factory, namespace, name, due_times, ready, start, results), daemon=True
        )
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    won: list[str] = []
    try:
        for _ in children:
            try:
                await asyncio.to_thread(ready.get, True, CHILD_DEADLINE_SECONDS)
            except queue_module.Empty:
                raise AssertionError(f"a firing process did not connect within {CHILD_DEADLINE_SECONDS:g}s") from None
        start.set()
        for _ in children:
            try:
                outcome, payload = await asyncio.to_thread(results.get, True, CHILD_DEADLINE_SECONDS)
            except queue_module.Empty:
                raise AssertionError(f"a firing process sent no result within {CHILD_DEADLINE_SECONDS:g}s") from None
            if outcome != "ok":
                raise AssertionError(f"a firing process failed:\n{payload}")
            won.extend(payload)
    finally:
        start.set()
        for child in children:
            await asyncio.to_thread(child.join, 30)
            if child.is_alive():
                child.kill()
    return won
