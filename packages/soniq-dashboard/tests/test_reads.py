"""The reads seam on real stores: what each page is told, and that pagination never repeats a row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from dash_harness import Store

from soniq import Soniq
from soniq.params import RegisterWorkerParams, SetSchedulePausedParams, SetWorkerStatusParams
from soniq.records import StaleJobPolicy, WorkerInfo, WorkerStatus
from soniq.redaction import redact_url
from soniq.rescue import sweep_stale_workers
from soniq_dashboard import create_dashboard_app
from soniq_dashboard.reads import DashboardReads, JobFilter, args_preview, trace_id_of


@pytest.mark.asyncio
async def test_pages_of_jobs_never_repeat_a_row_while_rows_arrive(producer: Soniq) -> None:
    reads = DashboardReads(producer)
    first_ids = await producer.enqueue_many("dash_jobs.quick", [{"n": i} for i in range(7)])
    seen: list[str] = []
    page = await reads.jobs_page(JobFilter(), limit=3)
    seen += [r["id"] for r in page.rows]
    await producer.enqueue_many("dash_jobs.quick", [{"n": 100 + i} for i in range(2)])
    while page.next_cursor:
        page = await reads.jobs_page(JobFilter(), cursor=page.next_cursor, limit=3)
        seen += [r["id"] for r in page.rows]
    assert len(seen) == len(set(seen))
    assert set(first_ids) <= set(seen)


@pytest.mark.asyncio
async def test_filters_and_search(producer: Soniq) -> None:
    reads = DashboardReads(producer)
    quick = await producer.enqueue("dash_jobs.quick", n=1)
    await producer.enqueue("dash_jobs.flaky", flag="x", queue="other")
    by_name = await reads.jobs_page(JobFilter(name="dash_jobs.fl"))  # a name filter is a prefix
    assert [r["job_name"] for r in by_name.rows] == ["dash_jobs.flaky"]
    by_queue = await reads.jobs_page(JobFilter(queue="other"))
    assert [r["queue"] for r in by_queue.rows] == ["other"]
    by_id = await reads.jobs_page(JobFilter(search=quick))
    assert [r["id"] for r in by_id.rows] == [quick]
    by_search_name = await reads.jobs_page(JobFilter(search="dash_jobs.qu"))
    assert [r["id"] for r in by_search_name.rows] == [quick]
    assert (await reads.jobs_page(JobFilter(status="done"))).rows == []


@pytest.mark.asyncio
async def test_jobs_scheduled_for_later_are_told_apart_from_due_ones(producer: Soniq) -> None:
    reads = DashboardReads(producer)
    due = await producer.enqueue("dash_jobs.quick", n=1)
    later = await producer.enqueue("dash_jobs.quick", n=2, scheduled_at=datetime.now(UTC) + timedelta(hours=1))

    everything = {r["id"]: r["scheduled_later"] for r in (await reads.jobs_page(JobFilter())).rows}
    assert everything == {due: False, later: True}
    assert [r["id"] for r in (await reads.jobs_page(JobFilter(status="scheduled"))).rows] == [later]
    assert [r["id"] for r in (await reads.jobs_page(JobFilter(status="queued"))).rows] == [due]
    # Paged one row at a time, the filter still walks every queued row exactly once.
    page = await reads.jobs_page(JobFilter(status="queued"), limit=1)
    assert [r["id"] for r in page.rows] == [due]
    assert (
        page.next_cursor is None or (await reads.jobs_page(JobFilter(status="queued"), page.next_cursor, 1)).rows == []
    )


def test_the_argument_preview_masks_passwords_and_stays_short() -> None:
    preview = args_preview({"user": "ann", "password": "hunter2", "dsn": "postgresql://app:s3cret@db/app"})
    assert preview == 'user="ann", password=***, dsn="postgresql://app:***@db/app"'
    long = args_preview({"text": "x" * 500})
    assert len(long) == 120
    assert long.endswith("…")


@pytest.mark.asyncio
async def test_overview_counts_queues_and_the_oldest_queued_age(producer: Soniq) -> None:
    reads = DashboardReads(producer)
    assert (await reads.overview()).oldest_queued_age is None
    await producer.enqueue("dash_jobs.quick", n=1, queue="a")
    await producer.enqueue("dash_jobs.quick", n=2, queue="b")
    overview = await reads.overview()
    assert overview.totals["queued"] == 2
    counts = dict(overview.queues)
    assert counts["a"]["queued"] == 1
    assert counts["b"]["total"] == 1
    assert overview.oldest_queued_age is not None
    assert overview.oldest_queued_age.total_seconds() >= 0
    assert [w.label for w in overview.windows] == ["last hour", "last day"]


@pytest.mark.asyncio
async def test_the_overview_tells_due_jobs_from_later_ones_and_ages_only_due_ones(producer: Soniq) -> None:
    reads = DashboardReads(producer)
    await producer.enqueue("dash_jobs.quick", n=1, queue="a", scheduled_at=datetime.now(UTC) + timedelta(hours=2))
    only_later = await reads.overview()
    assert (only_later.totals["due"], only_later.totals["scheduled"], only_later.totals["queued"]) == (0, 1, 1)
    assert only_later.oldest_queued_age is None  # nothing is waiting: the one queued job is not due yet
    due = await producer.enqueue("dash_jobs.quick", n=2, queue="a")
    created = (await producer.get_job(due) or {})["created_at"]
    both = await reads.overview()
    assert (both.totals["due"], both.totals["scheduled"]) == (1, 1)
    assert (dict(both.queues)["a"]["due"], dict(both.queues)["a"]["scheduled"]) == (1, 1)
    assert both.oldest_queued_age is not None
    # The age is the due job's, younger than the scheduled job's, which was created first.
    assert both.oldest_queued_age <= datetime.now(UTC) - created.astimezone(UTC)


@pytest.mark.asyncio
async def test_worker_rows_map_onto_the_state_machine_names(producer: Soniq) -> None:
    backend = await producer.connected_backend()
    for worker_id in ("w-running", "w-draining", "w-forced", "w-lost"):
        info = WorkerInfo(id=worker_id, hostname="h", pid=1, queues=("default",), concurrency=2)
        await backend.register_worker(RegisterWorkerParams(worker=info))
    await backend.set_worker_status(SetWorkerStatusParams("w-draining", WorkerStatus.STOPPING))
    await backend.set_worker_status(
        SetWorkerStatusParams("w-forced", WorkerStatus.STOPPING, state="FORCE_TIMEOUT_PATH")
    )
    await backend.set_worker_status(SetWorkerStatusParams("w-lost", WorkerStatus.STOPPING, state="WAIT_FOR_THREAD"))
    await backend.set_worker_status(SetWorkerStatusParams("w-lost", WorkerStatus.STOPPED))
    views = {v.id: v for v in await DashboardReads(producer).workers()}
    assert views["w-running"].state == "RUNNING"
    assert views["w-draining"].state == "DRAINING"
    assert views["w-forced"].state == "FORCE_TIMEOUT_PATH"
    assert views["w-lost"].state == "LOST"
    assert views["w-lost"].lost
    assert views["w-lost"].lost_in == "WAIT_FOR_THREAD"
    assert not views["w-running"].stale


@pytest.mark.asyncio
async def test_a_worker_that_went_silent_right_after_registering_is_lost_not_stopped(producer: Soniq) -> None:
    backend = await producer.connected_backend()
    info = WorkerInfo(id="w-killed", hostname="h", pid=1, queues=("default",), concurrency=2)
    await backend.register_worker(RegisterWorkerParams(worker=info))  # state stays NULL, as a worker leaves it
    clean = WorkerInfo(id="w-clean", hostname="h", pid=2, queues=("default",), concurrency=2)
    await backend.register_worker(RegisterWorkerParams(worker=clean))
    await backend.set_worker_status(SetWorkerStatusParams("w-clean", WorkerStatus.STOPPED, state="STOPPED"))
    before = {w.id: w.last_heartbeat for w in await backend.list_workers()}

    result = await sweep_stale_workers(backend, heartbeat_timeout=0.0, policy=StaleJobPolicy.REQUEUE)

    assert result.stale_workers == ("w-killed",)
    views = {v.id: v for v in await DashboardReads(producer).workers()}
    killed = views["w-killed"]
    assert (killed.state, killed.lost, killed.lost_in) == ("LOST", True, "RUNNING")
    assert killed.recovered_at is not None
    assert killed.rescued == []
    assert killed.last_shutdown is None  # recovery's record is not shown as a shutdown the worker did
    # The age shown is of the worker's own last heartbeat, not of recovery's write.
    assert killed.heartbeat_age >= datetime.now(UTC) - before["w-killed"].replace(tzinfo=UTC) - timedelta(seconds=1)
    assert (views["w-clean"].state, views["w-clean"].lost) == ("STOPPED", False)


@pytest.mark.asyncio
async def test_a_job_detail_falls_back_to_its_dead_letter_row(producer: Soniq) -> None:
    reads = DashboardReads(producer)
    assert await reads.job("no-such-id") is None
    job_id = await producer.enqueue("dash_jobs.quick", n=1)
    detail = await reads.job(job_id)
    assert detail is not None
    assert not detail.dead_letter
    assert detail.job["args"] == {"n": 1}


@pytest.mark.asyncio
async def test_schedules_list_every_trigger_with_its_state_and_lateness(producer: Soniq) -> None:
    reads = DashboardReads(producer)
    assert (await reads.schedules()).rows == []
    await producer.scheduler.add("dash_jobs.quick", every=90, args={"n": 1}, name="tick")
    await producer.scheduler.add("dash_jobs.flaky", cron="30 4 * * *", timezone="Europe/Paris", name="nightly")
    await producer.scheduler.pause("nightly")
    backend = await producer.connected_backend()
    # No scheduler runs here: a due time an hour ago stays unfired, and the page says how late it is.
    await backend.set_schedule_paused(
        SetSchedulePausedParams(name="tick", paused=False, next_run=datetime.now(UTC) - timedelta(hours=1))
    )

    rows = {r.name: r for r in (await reads.schedules()).rows}

    assert list(rows) == ["nightly", "tick"]
    tick, nightly = rows["tick"], rows["nightly"]
    assert (tick.trigger, tick.job_name, tick.paused, tick.run_count, tick.last_run) == (
        "every 90s",
        "dash_jobs.quick",
        False,
        0,
        None,
    )
    assert tick.lateness is not None
    assert timedelta(minutes=59) < tick.lateness < timedelta(minutes=61)
    assert (nightly.trigger, nightly.paused, nightly.lateness) == ("cron 30 4 * * * (Europe/Paris)", True, None)
    assert nightly.next_run > datetime.now(UTC)


def test_trace_id_comes_from_the_stored_traceparent() -> None:
    tid = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id_of({"traceparent": f"00-{tid}-00f067aa0ba902b7-01"}) == tid
    assert trace_id_of({"traceparent": "garbage"}) is None
    assert trace_id_of(None) is None


def test_urls_are_shown_without_their_password() -> None:
    assert redact_url("postgresql://app:s3cret@db:5432/app") == "postgresql://app:***@db:5432/app"
    assert "s3cret" not in redact_url("postgresql://db/app?user=app&password=s3cret")
    assert redact_url("sqlite:///soniq.db") == "sqlite:///soniq.db"


def test_writes_need_a_key_or_the_host_apps_auth() -> None:
    app = Soniq("memory://")
    with pytest.raises(ValueError, match="api_key"):
        create_dashboard_app(app, writes=True)
    create_dashboard_app(app, writes=True, authorize=lambda request: True)
    create_dashboard_app(app, writes=True, api_key="k")


def test_the_command_binds_this_machine_only_by_default() -> None:
    import argparse

    from soniq_dashboard.command import add_command

    parser = argparse.ArgumentParser()
    add_command(parser)
    args = parser.parse_args([])
    assert args.host == "127.0.0.1"
    assert args.port == 6161
    assert not args.writes


@pytest.mark.asyncio
async def test_overview_shows_the_limits_the_app_declares(store: Store) -> None:
    app = Soniq(store.url, queue_limits={"emails": {"max_concurrent": 3, "rate_limit": "10/5s"}})

    @app.job(name="crm.sync", max_concurrent=1, limit_key="customer_id")
    async def sync(customer_id: int) -> None: ...

    await app.setup()
    try:
        await app.enqueue(sync, customer_id=1)
        overview = await DashboardReads(app).overview()
        assert overview.queue_limits == {"emails": "at most 3 running, 10/5s starts"}
        counts = dict(overview.queues)
        assert counts["emails"]["total"] == 0  # a limited queue is listed before its first job
        assert counts["default"]["queued"] == 1
        assert overview.job_limits == [("crm.sync", "at most 1 running, per limit_key")]
    finally:
        if store.namespace:
            await app.backend.drop_schema()
        await app.close()
