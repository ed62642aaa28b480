"""A worker claims only the names it has registered; names nobody registers expire to `unknown_job`."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from soniq import Soniq
from soniq.errors import NoJobsRegisteredError
from soniq.observers import RecordingObserver
from soniq.params import ClaimJobsParams, RegisterWorkerParams
from soniq.records import WorkerInfo

pytestmark = pytest.mark.asyncio


async def test_a_worker_with_no_jobs_refuses_to_start(fast_settings: dict[str, Any]) -> None:
    app = Soniq("memory://", **fast_settings)
    with pytest.raises(NoJobsRegisteredError, match="allow_no_jobs"):
        await app.run_worker(run_once=True, install_signal_handlers=False)
    allowed = Soniq("memory://", allow_no_jobs=True, **fast_settings)
    summary = await asyncio.wait_for(allowed.run_worker(run_once=True, install_signal_handlers=False), 10)
    assert summary.trigger == "run_once"


async def test_a_worker_leaves_other_names_alone_and_reports_its_own(
    make_app: Callable[..., Soniq], wait_until: Any
) -> None:
    producer = make_app()
    worker_app = make_app(unknown_job_timeout=None)

    @producer.job(name="deploy.new_job")
    async def new_job() -> None: ...

    @worker_app.job(name="deploy.old_job")
    async def old_job() -> str:
        return "old"

    stranger = await producer.enqueue(new_job)
    known = await worker_app.enqueue(old_job)
    worker = worker_app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())

    async def known_done() -> bool:
        row = await worker_app.get_job(known)
        return row is not None and row["status"] == "done"

    await wait_until(known_done, timeout=10)
    backend = await worker_app.connected_backend()
    workers = await backend.list_workers()
    assert [w.job_names for w in workers] == [("deploy.old_job",)]
    worker.stop("test")
    await asyncio.wait_for(task, 10)
    row = await producer.get_job(stranger)
    assert row is not None
    assert (row["status"], row["attempts"], row["last_error"]) == ("queued", 0, None)
    assert await producer.dead_letter.get(stranger) is None


async def test_names_no_live_worker_registers_expire_to_the_dead_letter_table(
    make_app: Callable[..., Soniq], wait_until: Any
) -> None:
    producer = make_app()
    worker_app = make_app(unknown_job_timeout=0.3)

    @producer.job(name="nobody.runs.this")
    async def orphan() -> None: ...

    @worker_app.job(name="someone.runs.this")
    async def mine() -> None: ...

    job_id = await producer.enqueue(orphan)
    worker = worker_app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    await wait_until(lambda: producer.dead_letter.get(job_id), timeout=15)
    worker.stop("test")
    await asyncio.wait_for(task, 10)
    dead = await producer.dead_letter.get(job_id)
    assert dead is not None
    assert (dead["dead_letter_reason"], dead["attempts"]) == ("unknown_job", 0)
    assert "unknown_job_timeout" in dead["last_error"]
    assert "someone.runs.this" in dead["last_error"]


async def test_nothing_expires_while_a_live_worker_has_not_reported_its_names(
    fast_settings: dict[str, Any], wait_until: Any
) -> None:
    app = Soniq("memory://", unknown_job_timeout=0.1, **fast_settings)
    producer = Soniq("memory://", backend=app.backend, **fast_settings)

    @producer.job(name="maybe.the.old.worker.has.it")
    async def theirs() -> None: ...

    @app.job(name="ours")
    async def ours() -> None: ...

    job_id = await producer.enqueue(theirs)
    backend = await app.connected_backend()
    # An older release registers without job_names: it might run any name.
    old = WorkerInfo(id="old-release", hostname="h", pid=1, queues=None, concurrency=1)
    await backend.register_worker(RegisterWorkerParams(worker=old))
    real_list_workers = backend.list_workers
    looked: list[int] = []

    async def list_workers() -> list[Any]:
        looked.append(1)
        return await real_list_workers()

    backend.list_workers = list_workers  # type: ignore[method-assign]
    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    own = await app.enqueue(ours)

    async def own_done() -> bool:
        row = await app.get_job(own)
        return row is not None and row["status"] == "done"

    await wait_until(own_done, timeout=10)
    # Several sweeps look at the workers while the old one's heartbeat is still fresh (1 s window).
    await wait_until(lambda: len(looked) >= 3, timeout=10)
    worker.stop("test")
    await asyncio.wait_for(task, 10)
    assert await app.dead_letter.get(job_id) is None


async def test_a_row_of_an_unknown_name_from_a_store_ignoring_job_names_is_handed_back_untouched(
    fast_settings: dict[str, Any],
) -> None:
    observer = RecordingObserver()
    app = Soniq("memory://", extra_observers=[observer], **fast_settings)
    producer = Soniq("memory://", backend=app.backend, **fast_settings)

    @producer.job(name="elsewhere")
    async def elsewhere() -> None: ...

    @app.job(name="here")
    async def here() -> str:
        return "ran"

    backend: Any = await app.connected_backend()
    real_claim = backend.claim_jobs

    async def claim_ignoring_names(params: ClaimJobsParams) -> list[Any]:
        # What a backend that ignores `job_names` does.
        claimed: list[Any] = await real_claim(dataclasses.replace(params, job_names=None))
        return claimed

    backend.claim_jobs = claim_ignoring_names
    stranger = await producer.enqueue(elsewhere)
    mine = await app.enqueue(here)
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)
    assert (await app.get_job(mine) or {}).get("status") == "done"
    row = await app.get_job(stranger)
    assert row is not None
    assert (row["status"], row["attempts"], row["last_error"]) == ("queued", 0, None)
    assert await app.dead_letter.get(stranger) is None
    assert {(n.job_id, n.reason, n.written) for n in observer.nacks} == {(stranger, "unknown_job", True)}
