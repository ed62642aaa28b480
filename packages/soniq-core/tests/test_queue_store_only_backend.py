"""A backend that fills only the required role, `QueueStore`, runs workers; every feature that needs
an optional role refuses with `MissingBackendRoleError` naming the feature, the role and the backend,
at the point the feature is used."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from cli_process import run_soniq

from soniq import BackendCapabilities, Soniq
from soniq.errors import JobNotFoundError, MissingBackendRoleError
from soniq.limits import limit_usage
from soniq.params import ClaimJobsParams, RegisterWorkerParams
from soniq.records import CancelOutcome, WorkerInfo
from soniq.scheduling.duties import FleetDuties
from soniq_memory import MemoryBackend

from .conftest import _wait_until


class QueueStoreOnly(MemoryBackend):
    """The memory backend declaring the one required role and nothing else."""

    @property
    def capabilities(self) -> BackendCapabilities:
        return dataclasses.replace(super().capabilities, roles={"QueueStore": 1})


def minimal_app(fast_settings: dict[str, Any], **settings: Any) -> Soniq:
    return Soniq(backend=QueueStoreOnly(), **{**fast_settings, **settings})


async def refused(call: Callable[[], Awaitable[Any]], *, feature: str, role: str) -> MissingBackendRoleError:
    """Await `call`, which must raise the named error for `feature` and `role` on `QueueStoreOnly`."""
    with pytest.raises(MissingBackendRoleError) as caught:
        await call()
    check(caught.value, feature=feature, role=role)
    return caught.value


def check(error: MissingBackendRoleError, *, feature: str, role: str) -> None:
    assert error.feature == feature
    assert error.role == role
    assert error.backend.endswith("QueueStoreOnly")
    assert str(error).startswith(f"{feature} needs the backend role {role}")
    assert "QueueStoreOnly" in str(error)
    assert "QueueStore v1" in str(error)  # what it does declare


async def start(app: Soniq, **kwargs: Any) -> tuple[Any, asyncio.Task[Any]]:
    worker = app.worker(install_signal_handlers=False, **kwargs)
    task = asyncio.create_task(worker.run())
    store: Any = app.backend
    await _wait_until(lambda: worker.worker_id in store.workers, timeout=5)
    return worker, task


async def status_of(app: Soniq, job_id: str) -> str | None:
    row = await app.get_job(job_id)
    return None if row is None else str(row["status"])


# -- a working worker ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_worker_runs_jobs_to_done_and_wait_for_polls_for_the_result(fast_settings: dict[str, Any]) -> None:
    app = minimal_app(fast_settings)

    @app.job()
    async def add(a: int, b: int) -> int:
        return a + b

    @app.job()
    def shout(text: str) -> str:
        return text.upper()

    first = await app.enqueue(add, a=2, b=3)
    second = await app.enqueue(shout, text="hi")
    worker, task = await start(app)
    assert await asyncio.wait_for(app.wait_for(first), 10) == 5  # no CancelChannel: read by polling
    assert await asyncio.wait_for(app.wait_for(second), 10) == "HI"
    assert await status_of(app, first) == "done"
    assert await app.get_result(second) == "HI"
    worker.stop("SIGTERM")
    summary = await asyncio.wait_for(task, 10)
    assert summary.processed == 2
    await app.close()


@pytest.mark.asyncio
async def test_failures_are_retried_then_dead_lettered_and_then_read_as_not_found(
    fast_settings: dict[str, Any],
) -> None:
    app = minimal_app(fast_settings)
    runs: list[int] = []

    @app.job(max_retries=1)
    async def flaky() -> None:
        runs.append(1)
        raise RuntimeError("boom")

    job_id = await app.enqueue(flaky)
    worker, task = await start(app)
    await _wait_until(lambda: _dead_lettered(app), timeout=10)
    assert len(runs) == 2  # the first run and one retry
    # The dead-letter row exists, but without DeadLetterStore it cannot be read: the job is not found.
    assert await app.get_job(job_id) is None
    with pytest.raises(JobNotFoundError, match="no DeadLetterStore role"):
        await asyncio.wait_for(app.wait_for(job_id), 10)
    worker.stop("SIGTERM")
    await asyncio.wait_for(task, 10)
    await app.close()


async def _dead_lettered(app: Soniq) -> bool:
    return (await app.get_queue_stats())["dead_letter"] == 1


@pytest.mark.asyncio
async def test_a_sigterm_stop_nacks_the_running_job_back_to_queued(fast_settings: dict[str, Any]) -> None:
    app = minimal_app(fast_settings, shutdown_timeout=0.2)
    started = asyncio.Event()

    @app.job()
    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    job_id = await app.enqueue(forever)
    worker, task = await start(app)
    await asyncio.wait_for(started.wait(), 10)
    assert await status_of(app, job_id) == "processing"
    worker.stop("SIGTERM")
    summary = await asyncio.wait_for(task, 10)
    assert summary.nacked_job_ids == [job_id]
    row = await app.get_job(job_id)
    assert row is not None
    assert row["status"] == "queued"
    assert row["worker_id"] is None
    assert row["attempts"] == 0
    await app.close()


@pytest.mark.asyncio
async def test_the_worker_logs_once_at_info_which_duties_it_skips(
    fast_settings: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    app = minimal_app(fast_settings)

    @app.job()
    async def noop() -> None: ...

    caplog.set_level(logging.INFO, logger="soniq")
    worker, task = await start(app)
    await _wait_until(lambda: any("skipping" in r.getMessage() for r in caplog.records), timeout=5)
    worker.stop("SIGTERM")
    await asyncio.wait_for(task, 10)
    skipped = [r for r in caplog.records if "skipping" in r.getMessage()]
    assert len(skipped) == 1
    assert skipped[0].levelno == logging.INFO
    text = skipped[0].getMessage()
    assert "no ScheduleStore role" in text
    assert "no leader" in text
    assert "the scheduler loop" in text
    assert "stale recovery still runs" in text
    await app.close()


@pytest.mark.asyncio
async def test_stale_recovery_requeues_the_rows_of_a_dead_worker(fast_settings: dict[str, Any]) -> None:
    app = minimal_app(fast_settings, heartbeat_interval=0.1, heartbeat_timeout=0.3)

    @app.job(max_retries=3)
    async def work() -> None: ...

    job_id = await app.enqueue(work)
    backend = await app.connected_backend()
    # A worker that claimed the row and then died: it never heartbeats again.
    ghost = WorkerInfo(id="ghost", hostname="gone", pid=1, queues=None, concurrency=1, job_names=("x",))
    await backend.register_worker(RegisterWorkerParams(worker=ghost))
    (claimed,) = await backend.claim_jobs(ClaimJobsParams(worker_id="ghost", queues=None, limit=1, mark_started=True))
    assert claimed.id == job_id

    async def requeued() -> bool:
        return job_id in (await app.recover()).requeued

    await _wait_until(requeued, timeout=10, interval=0.1)
    assert await status_of(app, job_id) == "queued"
    await app.close()


# -- DeadLetterStore ---------------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_dead_letter_api_needs_the_dead_letter_store(fast_settings: dict[str, Any]) -> None:
    app = minimal_app(fast_settings)
    dead = app.dead_letter
    feature, role = "the dead-letter API", "DeadLetterStore"
    await refused(lambda: dead.list(), feature=feature, role=role)
    await refused(lambda: dead.get("some-id"), feature=feature, role=role)
    await refused(lambda: dead.replay("some-id"), feature=feature, role=role)
    await refused(lambda: dead.purge("some-id"), feature=feature, role=role)
    await refused(lambda: dead.delete("some-id"), feature=feature, role=role)
    await refused(lambda: dead.stats(), feature=feature, role=role)
    await refused(lambda: dead.cleanup(1), feature=feature, role=role)
    await refused(lambda: dead.export(), feature=feature, role=role)
    await app.close()


# -- OperatorReads -----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_listing_jobs_and_reading_limit_usage_need_operator_reads(fast_settings: dict[str, Any]) -> None:
    app = minimal_app(fast_settings, queue_limits={"mail": {"max_concurrent": 2}})
    await refused(lambda: app.list_jobs(), feature="listing jobs", role="OperatorReads")
    await refused(
        lambda: limit_usage(app.backend, app.group_limits()),
        feature="reading fleet-wide limit usage",
        role="OperatorReads",
    )
    assert (await app.get_queue_stats())["total"] == 0  # the counts are QueueStore's and still work
    await app.close()


# -- ScheduleStore -----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_schedules_need_the_schedule_store(fast_settings: dict[str, Any]) -> None:
    app = minimal_app(fast_settings)

    @app.job()
    async def tick() -> None: ...

    feature, role = "schedules", "ScheduleStore"
    await refused(lambda: app.scheduler.add(tick, every=60), feature=feature, role=role)
    await refused(lambda: app.scheduler.list(), feature=feature, role=role)
    await refused(lambda: app.scheduler.pause("tick"), feature=feature, role=role)
    await refused(lambda: app.scheduler.start(), feature=feature, role=role)
    assert not app.scheduler.running
    with pytest.raises(MissingBackendRoleError) as caught:  # what `soniq scheduler` builds
        FleetDuties(app.context, holder="scheduler-test", scheduler=True)
    check(caught.value, feature=feature, role=role)
    await app.close()


@pytest.mark.asyncio
async def test_a_worker_with_periodic_schedules_refuses_to_start(fast_settings: dict[str, Any]) -> None:
    app = minimal_app(fast_settings)

    @app.periodic(every=60)
    async def nightly() -> None: ...

    worker = app.worker(install_signal_handlers=False)
    await refused(worker.run, feature="schedules", role="ScheduleStore")
    store: Any = app.backend
    assert store.workers == {}  # refused before it registered, let alone claimed
    await app.close()


# -- CancelChannel -----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_queued_job_is_cancelled_but_a_running_one_is_refused(fast_settings: dict[str, Any]) -> None:
    app = minimal_app(fast_settings)
    started = asyncio.Event()
    release = asyncio.Event()

    @app.job()
    async def slow() -> str:
        started.set()
        await release.wait()
        return "finished"

    queued = await app.enqueue(slow, scheduled_at=3600)
    assert await app.cancel(queued) is CancelOutcome.CANCELLED
    assert await status_of(app, queued) == "cancelled"
    assert await app.cancel(queued) is CancelOutcome.ALREADY_FINISHED
    with pytest.raises(JobNotFoundError):
        await app.cancel("no-such-job")

    running = await app.enqueue(slow)
    worker, task = await start(app)
    await asyncio.wait_for(started.wait(), 10)
    error = await refused(lambda: app.cancel(running), feature="cancelling a running job", role="CancelChannel")
    assert isinstance(error, NotImplementedError)
    await refused(lambda: app.cancel_job(running), feature="cancelling a running job", role="CancelChannel")
    release.set()  # the refused cancel changed nothing: the job runs to its end
    assert await asyncio.wait_for(app.wait_for(running), 10) == "finished"
    worker.stop("SIGTERM")
    await asyncio.wait_for(task, 10)
    await app.close()


# -- SchemaAdmin -------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_setup_works_but_schema_migrations_need_schema_admin(fast_settings: dict[str, Any]) -> None:
    app = minimal_app(fast_settings)
    await app.setup()  # plain `setup()`, which every backend has
    await refused(app.schema_status, feature="schema migrations", role="SchemaAdmin")
    await refused(lambda: app.setup_schema(dry_run=True), feature="schema migrations", role="SchemaAdmin")
    await app.close()


# -- LimitStore --------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_enqueueing_with_a_limit_key_is_refused_and_stores_nothing(fast_settings: dict[str, Any]) -> None:
    app = minimal_app(fast_settings)

    @app.job(max_concurrent=1, limit_key="tenant")
    async def per_tenant(tenant: str) -> None: ...

    await refused(lambda: app.enqueue(per_tenant, tenant="a"), feature="fleet-wide limits", role="LimitStore")
    await refused(
        lambda: app.enqueue_many(per_tenant, [{"tenant": "a"}, {"tenant": "b"}]),
        feature="fleet-wide limits",
        role="LimitStore",
    )
    assert (await app.get_queue_stats())["total"] == 0
    await app.close()


@pytest.mark.asyncio
async def test_a_worker_with_limits_refuses_to_start_before_claiming(fast_settings: dict[str, Any]) -> None:
    app = minimal_app(fast_settings)

    @app.job(max_concurrent=1)
    async def limited() -> None: ...

    job_id = await app.enqueue(limited)  # no limit key: the row itself needs nothing
    worker = app.worker(install_signal_handlers=False)
    await refused(worker.run, feature="fleet-wide limits", role="LimitStore")
    assert await status_of(app, job_id) == "queued"  # never claimed
    store: Any = app.backend
    assert store.workers == {}
    await app.close()


# -- DependencyStore ---------------------------------------------------------------------


@pytest.mark.asyncio
async def test_dependencies_are_refused_and_nothing_is_stored(fast_settings: dict[str, Any]) -> None:
    app = minimal_app(fast_settings)

    @app.job()
    async def step(n: int) -> None: ...

    first = await app.enqueue(step, n=1)
    feature, role = "job dependencies", "DependencyStore"
    await refused(lambda: app.enqueue(step, n=2, depends_on=first), feature=feature, role=role)
    await refused(lambda: app.enqueue_many(step, [{"n": 3}], depends_on=[first]), feature=feature, role=role)
    await refused(lambda: app.chain(step.call(n=4), step.call(n=5)), feature=feature, role=role)  # type: ignore[attr-defined]
    assert (await app.get_queue_stats())["total"] == 1  # only the first job
    await app.close()


# -- the command line --------------------------------------------------------------------

APP_MODULE = textwrap.dedent(
    """
    import dataclasses

    from soniq import BackendCapabilities, Soniq
    from soniq_memory import MemoryBackend


    class QueueStoreOnly(MemoryBackend):
        @property
        def capabilities(self) -> BackendCapabilities:
            return dataclasses.replace(super().capabilities, roles={"QueueStore": 1})


    def plain() -> Soniq:
        app = Soniq("memory://", backend=QueueStoreOnly())

        @app.job()
        async def noop() -> None: ...

        return app


    def limited() -> Soniq:
        app = Soniq("memory://", backend=QueueStoreOnly())

        @app.job(max_concurrent=1)
        async def noop() -> None: ...

        return app
    """
)


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "minimal_app.py").write_text(APP_MODULE)
    return tmp_path


@pytest.mark.parametrize(
    ("command", "app", "feature", "role"),
    [
        (("dead-letter", "list"), "plain", "the dead-letter API", "DeadLetterStore"),
        (("dead-letter", "stats"), "plain", "the dead-letter API", "DeadLetterStore"),
        (("migrate-status",), "plain", "schema migrations", "SchemaAdmin"),
        (("worker", "--run-once"), "limited", "fleet-wide limits", "LimitStore"),
        (("scheduler",), "plain", "schedules", "ScheduleStore"),
    ],
)
def test_commands_exit_non_zero_naming_the_missing_role(
    app_dir: Path, command: tuple[str, ...], app: str, feature: str, role: str
) -> None:
    result = run_soniq(*command, "--app", f"minimal_app:{app}", cwd=app_dir)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{feature} needs the backend role {role}" in result.stderr
    assert "minimal_app.QueueStoreOnly" in result.stderr


def test_setup_and_a_worker_run_on_the_command_line(app_dir: Path) -> None:
    setup = run_soniq("setup", "--app", "minimal_app:plain", cwd=app_dir)
    assert setup.returncode == 0, setup.stderr
    assert "schema ready" in setup.stdout
    worker = run_soniq("worker", "--run-once", "--app", "minimal_app:plain", cwd=app_dir)
    assert worker.returncode == 0, worker.stderr
