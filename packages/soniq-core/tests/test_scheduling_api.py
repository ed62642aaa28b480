"""`app.scheduler`, `@app.periodic`, the scheduler loop and the leader, on the memory backend with a manual clock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from soniq import BaseObserver, ManualClock, ScheduleError, Soniq, UnknownJobError, daily, every
from soniq.observers import ScheduleFiredEvent
from soniq.params import GetLeaseParams, JobPageParams
from soniq.scheduling.runner import ScheduleRunner
from soniq.worker.leader import LeaderDuties

pytestmark = pytest.mark.asyncio

START = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


class Fired(BaseObserver):
    def __init__(self) -> None:
        self.events: list[ScheduleFiredEvent] = []

    def on_schedule_fired(self, event: ScheduleFiredEvent) -> None:
        self.events.append(event)


def make_app(**settings: Any) -> tuple[Soniq, ManualClock, Fired]:
    fired = Fired()
    app = Soniq("memory://", extra_observers=[fired], observers="", **settings)
    clock = ManualClock(START)
    app.scheduler.clock = clock
    return app, clock, fired


async def jobs_of(app: Soniq, name: str) -> list[Any]:
    backend = await app.connected_backend()
    page = await backend.job_page(JobPageParams(job_name=name, limit=10_000))
    return sorted(page.rows, key=lambda r: r.scheduled_at)


async def test_add_get_list_pause_resume_remove() -> None:
    app, clock, _ = make_app()

    @app.job(queue="reports", priority=7)
    async def report(region: str) -> None:
        return None

    name = await app.scheduler.add(report, cron=daily().at("09:00"), args={"region": "eu"}, timezone="Europe/Berlin")
    definition = app.registry.find_by_function(report)
    assert definition is not None
    assert name == definition.name
    got = await app.scheduler.get(name)
    assert got is not None
    assert got["next_run"] == datetime(2026, 5, 2, 7, 0, tzinfo=UTC)
    assert (got["queue"], got["priority"], got["args"], got["status"]) == ("reports", 7, {"region": "eu"}, "active")
    assert (got["last_run"], got["run_count"], got["last_job_id"], got["orphaned"]) == (None, 0, None, False)
    assert got["schedule_type"] == "cron"
    assert got["schedule_value"] == "0 9 * * *"

    # Upsert by name: a second add replaces the definition, one row stays.
    await app.scheduler.add(report, cron=daily().at("09:00"), args={"region": "us"}, timezone="Europe/Berlin")
    listed = await app.scheduler.list()
    assert [s["args"] for s in listed] == [{"region": "us"}]

    assert await app.scheduler.pause(name) is True
    assert [s["name"] for s in await app.scheduler.list(status="paused")] == [name]
    assert await app.scheduler.list(status="active") == []
    clock.advance(days=3)
    assert await app.scheduler.resume(name) is True
    resumed = await app.scheduler.get(name)
    assert resumed is not None
    assert resumed["next_run"] == datetime(2026, 5, 5, 7, 0, tzinfo=UTC)
    assert await app.scheduler.remove(name) is True
    assert await app.scheduler.get(name) is None
    assert await app.scheduler.remove(name) is False
    assert await app.scheduler.pause("nope") is False


async def test_bad_input_names_the_option_and_stores_nothing() -> None:
    app, _, _ = make_app()

    @app.job
    async def tick() -> None:
        return None

    with pytest.raises(ScheduleError, match=r"^cron: "):
        await app.scheduler.add(tick, cron="every day")
    with pytest.raises(ScheduleError, match=r"^timezone: "):
        await app.scheduler.add(tick, cron="0 9 * * *", timezone="Europe/Atlantis")
    with pytest.raises(ScheduleError, match=r"^every: "):
        await app.scheduler.add(tick, every=-1)
    with pytest.raises(ScheduleError, match=r"^max_attempts: "):
        await app.scheduler.add(tick, every=5, max_attempts=0)

    async def stray() -> None:
        return None

    with pytest.raises(UnknownJobError, match="target"):
        await app.scheduler.add(stray, every=5)
    assert await app.scheduler.list() == []


async def test_periodic_validates_at_decoration() -> None:
    app, _, _ = make_app()
    with pytest.raises(ScheduleError, match=r"^cron: "):

        @app.periodic(cron="not cron")
        async def broken() -> None:
            return None

    with pytest.raises(ScheduleError, match=r"^timezone: "):
        app.periodic(cron="0 9 * * *", timezone="Nowhere/Special")
    assert app.scheduler.declared == {}


async def test_one_due_time_fires_once_however_many_loops_look_at_it() -> None:
    app, clock, fired = make_app()

    @app.job
    async def beat() -> None:
        return None

    name = await app.scheduler.add(beat, every=every(10).seconds())
    loops = [ScheduleRunner(app.context, scheduler_id=f"s{i}", clock=clock) for i in range(4)]
    for _ in range(5):
        clock.advance(seconds=10)
        await asyncio.gather(*(loop.tick() for loop in loops))
    rows = await jobs_of(app, name)
    assert [r.scheduled_at for r in rows] == [START + timedelta(seconds=10 * k) for k in range(1, 6)]
    assert len(fired.events) == 5
    assert [e.due_at for e in fired.events] == [r.scheduled_at for r in rows]
    stored = await app.scheduler.get(name)
    assert stored is not None
    assert stored["run_count"] == 5
    assert stored["last_job_id"] == rows[-1].id
    assert stored["last_run"] == clock.now()
    assert stored["next_run"] == START + timedelta(seconds=60)


@pytest.mark.parametrize(("policy", "expected"), [("skip", 0), ("latest", 1), ("all", 5)])
async def test_catch_up_after_downtime(policy: str, expected: int) -> None:
    app, clock, fired = make_app()

    @app.job
    async def hourly() -> None:
        return None

    name = await app.scheduler.add(hourly, every=3600, catch_up=policy, catch_up_limit=5)
    clock.advance(hours=10, minutes=30)  # ten due times missed, none on time
    await ScheduleRunner(app.context, scheduler_id="s", clock=clock).tick()
    assert len(fired.events) == expected
    assert all(e.catch_up for e in fired.events)
    stored = await app.scheduler.get(name)
    assert stored is not None
    assert stored["next_run"] == START + timedelta(hours=11)
    assert stored["run_count"] == expected


async def test_a_schedule_for_a_job_no_one_has_is_orphaned_and_still_fires() -> None:
    app, clock, fired = make_app()
    await app.scheduler.add("billing.removed_job", every=60)
    (view,) = await app.scheduler.list()
    assert view["orphaned"] is True
    assert view["registered_here"] is False
    clock.advance(seconds=60)
    await ScheduleRunner(app.context, scheduler_id="s", clock=clock).tick()
    assert [e.job_name for e in fired.events] == ["billing.removed_job"]


async def test_the_lease_has_one_holder_and_the_leader_prunes(wait_until: Any) -> None:
    app = Soniq("memory://", observers="", leader_lease_ttl=0.6, prune_interval=0.05)
    backend = await app.connected_backend()
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    a = LeaderDuties(backend, app.settings, holder="a")
    b = LeaderDuties(backend, app.settings, holder="b")
    tasks = [asyncio.create_task(a.run(stop_a)), asyncio.create_task(b.run(stop_b))]
    await wait_until(lambda: a.is_leader or b.is_leader)
    first, second, stop_first = (a, b, stop_a) if a.is_leader else (b, a, stop_b)
    assert not second.is_leader
    lease = await backend.get_lease(GetLeaseParams())
    assert lease is not None
    assert lease.holder == first.holder
    stop_first.set()  # a clean stop releases the lease, so the other takes over within one beat
    await wait_until(lambda: second.is_leader, timeout=3)
    stop_a.set()
    stop_b.set()
    await asyncio.gather(*tasks)
    assert await backend.get_lease(GetLeaseParams()) is None


async def test_a_worker_runs_periodic_jobs_and_stops_its_loops_at_the_signal(wait_until: Any) -> None:
    ran: list[int] = []
    app = Soniq(
        "memory://",
        observers="",
        poll_interval=0.02,
        scheduler_poll_interval=0.05,
        heartbeat_interval=0.2,
        heartbeat_timeout=1.0,
    )

    @app.periodic(every=1, catch_up="all", catch_up_limit=100)
    async def pulse() -> None:
        ran.append(1)

    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    await wait_until(lambda: len(ran) >= 2, timeout=10)
    backend = await app.connected_backend()
    lease = await backend.get_lease(GetLeaseParams())
    assert lease is not None
    assert lease.holder == worker.worker_id
    worker.stop()
    await task
    assert await backend.get_lease(GetLeaseParams()) is None
    (view,) = await app.scheduler.list()
    assert view["run_count"] >= 2


async def test_the_leader_prunes_expired_rows_in_batches_and_keeps_the_rest(wait_until: Any) -> None:
    from soniq.params import ClaimJobsParams, CompleteJobsParams, JobResult, RegisterWorkerParams
    from soniq.records import WorkerInfo

    app = Soniq("memory://", observers="", prune_batch_size=7, prune_pause=0.0)

    @app.job
    async def work() -> None:
        return None

    backend = await app.connected_backend()
    await backend.register_worker(
        RegisterWorkerParams(WorkerInfo(id="w", hostname="h", pid=1, queues=None, concurrency=1))
    )
    ids = await app.enqueue_many(work, [{} for _ in range(30)])
    claimed = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=25, mark_started=True))
    past = datetime.now(UTC) - timedelta(minutes=1)
    future = datetime.now(UTC) + timedelta(days=1)
    results = [
        JobResult(job_id=row.id, result=None, expires_at=past if i < 20 else future) for i, row in enumerate(claimed)
    ]
    await backend.complete_jobs(CompleteJobsParams(worker_id="w", results=results))

    leader = LeaderDuties(backend, app.settings, holder="leader-test")
    stopping = asyncio.Event()
    task = asyncio.create_task(leader.run(stopping))
    await wait_until(lambda: leader.pruned_jobs == 20, timeout=5)
    stopping.set()
    await task
    left = {row.id for row in (await backend.job_page(JobPageParams(limit=100))).rows}
    expired = {r.job_id for r in results[:20]}
    assert not left & expired
    assert left == set(ids) - expired  # 5 done but not expired, 5 still queued


async def test_a_worker_with_the_scheduler_off_declares_but_does_not_fire(wait_until: Any) -> None:
    app = Soniq("memory://", observers="", scheduler_enabled=False, poll_interval=0.02)

    @app.periodic(every=1, name="quiet")
    async def quiet() -> None:
        return None

    worker = app.worker(install_signal_handlers=False)
    task = asyncio.create_task(worker.run())
    backend = await app.connected_backend()
    stored = await wait_until(lambda: app.scheduler.get("quiet"), timeout=5)
    # Two due times come and go with the lease held by this worker, and nothing fires.
    await wait_until(lambda: backend.get_lease(GetLeaseParams()), timeout=5)
    await wait_until(lambda: datetime.now(UTC) > stored["next_run"] + timedelta(seconds=2), timeout=10)
    worker.stop()
    await task
    after = await app.scheduler.get("quiet")
    assert after is not None
    assert after["run_count"] == 0
    assert await jobs_of(app, after["job_name"]) == []
