"""Schedules: definitions survive upserts, and each due time fires exactly once however many firers race."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

from soniq.backend import (
    Backend,
    DueSchedulesParams,
    FireScheduleParams,
    GetJobParams,
    GetScheduleParams,
    JobPageParams,
    JobStatus,
    ListSchedulesParams,
    QueueStatsParams,
    RemoveScheduleParams,
    ScheduleRecord,
    SetSchedulePausedParams,
    UpsertScheduleParams,
)
from soniq_contract_tests.harness import ContractHarness, must_get, new_job, unique_queue, utc_now
from soniq_contract_tests.suite._fire_processes import STEP, fire_until_done, race_in_processes

FIRERS = 8
"""How many firers race on one due time."""
FIRING_PROCESSES = 3
DUE_TIMES_RACED = 20


def whole_second(moment: datetime) -> datetime:
    """Schedule times the tests pass in: exact at any store's precision."""
    return moment.replace(microsecond=0)


def definition(**fields: Any) -> UpsertScheduleParams:
    values: dict[str, Any] = {
        "name": f"schedule-{uuid.uuid4().hex[:8]}",
        "job_name": "contract.job",
        "next_run": whole_second(utc_now()) - timedelta(seconds=10),
        "cron": "*/5 * * * *",
        "timezone": "Europe/Paris",
        "queue": unique_queue(),
        "priority": 7,
        "max_attempts": 4,
        "args": {"report": "daily", "n": [1, 2]},
        "catch_up": "latest",
        "catch_up_limit": 3,
    }
    values.update(fields)
    return UpsertScheduleParams(**values)


async def must_get_schedule(backend: Backend, name: str) -> ScheduleRecord:
    row = await backend.get_schedule(GetScheduleParams(name=name))
    if row is None:
        raise AssertionError(f"get_schedule({name!r}) returned None; the schedule should exist")
    return row


def fire_params(row: ScheduleRecord, *, jobs: int = 1, step: timedelta = timedelta(minutes=5)) -> FireScheduleParams:
    return FireScheduleParams(
        name=row.name,
        expected_next_run=row.next_run,
        new_next_run=row.next_run + step,
        jobs=[new_job(job_name=row.job_name, queue=row.queue, args=dict(row.args)) for _ in range(jobs)],
        fired_at=whole_second(utc_now()),
    )


@contextlib.asynccontextmanager
async def firers(contract: ContractHarness, backend: Backend, count: int) -> AsyncIterator[list[Backend]]:
    """`count` backends on one store: separate instances (own connections) where the store is shared."""
    if not backend.capabilities.shared_across_processes:
        yield [backend] * count
        return
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(contract.peer(backend)) for _ in range(count)]


class ScheduleContract:
    async def test_upsert_stores_the_definition_and_get_returns_it(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            params = definition()
            stored = await backend.upsert_schedule(params)
            assert stored == await must_get_schedule(backend, params.name)
            assert (stored.name, stored.job_name, stored.queue, stored.priority, stored.max_attempts) == (
                params.name,
                params.job_name,
                params.queue,
                7,
                4,
            )
            assert dict(stored.args) == {"report": "daily", "n": [1, 2]}
            assert (stored.cron, stored.every_seconds, stored.timezone) == ("*/5 * * * *", None, "Europe/Paris")
            assert (stored.catch_up, stored.catch_up_limit, stored.paused) == ("latest", 3, False)
            assert stored.next_run == params.next_run
            assert (stored.last_run, stored.run_count, stored.last_job_id) == (None, 0, None)
            assert await backend.get_schedule(GetScheduleParams(name="no-such-schedule")) is None

    async def test_interval_schedule_keeps_fractional_seconds(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            stored = await backend.upsert_schedule(definition(cron=None, every_seconds=90.5, timezone="UTC"))
            assert (stored.cron, stored.every_seconds) == (None, 90.5)

    async def test_list_is_in_name_order_and_filters_by_name(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            for name in ("b-report", "c-cleanup", "a-digest"):
                await backend.upsert_schedule(definition(name=name))
            listed = await backend.list_schedules(ListSchedulesParams())
            assert [row.name for row in listed] == ["a-digest", "b-report", "c-cleanup"]
            some = await backend.list_schedules(ListSchedulesParams(names=["c-cleanup", "a-digest", "missing"]))
            assert [row.name for row in some] == ["a-digest", "c-cleanup"]

    async def test_redeclaring_with_the_same_timing_keeps_next_run_and_history(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            first = await backend.upsert_schedule(definition())
            ids = await backend.fire_schedule(fire_params(first))
            assert ids is not None
            fired = await must_get_schedule(backend, first.name)
            # A worker restarting with the same declaration computes a later next_run: it must not win.
            again = await backend.upsert_schedule(
                definition(
                    name=first.name,
                    queue=first.queue,
                    next_run=fired.next_run + timedelta(hours=1),
                    priority=1,
                    args={"report": "weekly"},
                )
            )
            assert again.next_run == fired.next_run
            assert (again.run_count, again.last_job_id, again.last_run) == (1, ids[-1], fired.last_run)
            assert (again.priority, dict(again.args)) == (1, {"report": "weekly"})
            assert again.created_at == first.created_at

    async def test_changing_the_timing_or_asking_for_it_replaces_next_run(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            first = await backend.upsert_schedule(definition())
            later = first.next_run + timedelta(hours=2)
            changed = await backend.upsert_schedule(
                definition(name=first.name, cron="0 * * * *", next_run=later, queue=first.queue)
            )
            assert (changed.cron, changed.next_run) == ("0 * * * *", later)
            moved_zone = await backend.upsert_schedule(
                definition(name=first.name, cron="0 * * * *", timezone="UTC", next_run=later + timedelta(hours=1))
            )
            assert moved_zone.next_run == later + timedelta(hours=1)
            reset = await backend.upsert_schedule(
                definition(
                    name=first.name,
                    cron="0 * * * *",
                    timezone="UTC",
                    next_run=later + timedelta(hours=3),
                    reset_next_run=True,
                )
            )
            assert reset.next_run == later + timedelta(hours=3)

    async def test_pause_survives_a_redeclaration_and_resume_can_move_next_run(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await backend.upsert_schedule(definition())
            assert await backend.set_schedule_paused(SetSchedulePausedParams(name=row.name, paused=True))
            redeclared = await backend.upsert_schedule(definition(name=row.name, queue=row.queue))
            assert redeclared.paused is True
            assert await backend.due_schedules(DueSchedulesParams(limit=10)) == []
            resume_at = whole_second(utc_now()) + timedelta(minutes=1)
            assert await backend.set_schedule_paused(
                SetSchedulePausedParams(name=row.name, paused=False, next_run=resume_at)
            )
            resumed = await must_get_schedule(backend, row.name)
            assert (resumed.paused, resumed.next_run) == (False, resume_at)
            forced = await backend.upsert_schedule(definition(name=row.name, queue=row.queue, paused=True))
            assert forced.paused is True
            assert not await backend.set_schedule_paused(SetSchedulePausedParams(name="no-such", paused=True))

    async def test_remove_deletes_the_schedule_but_not_its_jobs(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await backend.upsert_schedule(definition())
            ids = await backend.fire_schedule(fire_params(row))
            assert ids is not None
            assert await backend.remove_schedule(RemoveScheduleParams(name=row.name))
            assert await backend.get_schedule(GetScheduleParams(name=row.name)) is None
            assert not await backend.remove_schedule(RemoveScheduleParams(name=row.name))
            assert (await must_get(backend, ids[0])).status is JobStatus.QUEUED

    async def test_due_lists_unpaused_schedules_at_or_before_now_earliest_first(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            now = whole_second(utc_now())
            for name, offset in (("late", -10), ("early", -60), ("exact", 0), ("future", 3600), ("paused", -90)):
                await backend.upsert_schedule(definition(name=name, next_run=now + timedelta(seconds=offset)))
            await backend.set_schedule_paused(SetSchedulePausedParams(name="paused", paused=True))
            due = await backend.due_schedules(DueSchedulesParams(now=now, limit=10))
            assert [row.name for row in due] == ["early", "late", "exact"]
            assert [row.name for row in await backend.due_schedules(DueSchedulesParams(now=now, limit=2))] == [
                "early",
                "late",
            ]
            by_store_clock = await backend.due_schedules(DueSchedulesParams(limit=10))
            assert [row.name for row in by_store_clock] == ["early", "late", "exact"]
            later = await backend.due_schedules(DueSchedulesParams(now=now + timedelta(hours=2), limit=10))
            assert [row.name for row in later] == ["early", "late", "exact", "future"]

    async def test_fire_enqueues_the_jobs_and_advances_in_one_write(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await backend.upsert_schedule(definition())
            params = fire_params(row, jobs=2)
            ids = await backend.fire_schedule(params)
            assert ids == [job.id for job in params.jobs]
            for job in params.jobs:
                stored = await must_get(backend, job.id)
                assert (stored.status, stored.job_name, stored.queue, stored.attempts) == (
                    JobStatus.QUEUED,
                    row.job_name,
                    row.queue,
                    0,
                )
                assert dict(stored.args) == {"report": "daily", "n": [1, 2]}
            after = await must_get_schedule(backend, row.name)
            assert after.next_run == params.new_next_run
            assert (after.run_count, after.last_job_id, after.last_run) == (2, ids[-1], params.fired_at)

    async def test_fire_without_jobs_only_advances(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await backend.upsert_schedule(definition())
            params = fire_params(row, jobs=0)
            assert await backend.fire_schedule(params) == []
            after = await must_get_schedule(backend, row.name)
            assert (after.next_run, after.run_count, after.last_run, after.last_job_id) == (
                params.new_next_run,
                0,
                None,
                None,
            )

    async def test_a_stale_expected_next_run_fires_nothing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await backend.upsert_schedule(definition())
            assert await backend.fire_schedule(fire_params(row)) is not None
            stale = fire_params(row)  # still expects the next_run that has just been fired
            assert await backend.fire_schedule(stale) is None
            assert await backend.get_job(GetJobParams(job_id=stale.jobs[0].id)) is None
            assert (await backend.queue_stats(QueueStatsParams(queue=row.queue))).total == 1
            after = await must_get_schedule(backend, row.name)
            assert (after.run_count, after.next_run) == (1, row.next_run + timedelta(minutes=5))

    async def test_a_paused_or_removed_schedule_fires_nothing(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await backend.upsert_schedule(definition())
            await backend.set_schedule_paused(SetSchedulePausedParams(name=row.name, paused=True))
            assert await backend.fire_schedule(fire_params(row)) is None
            await backend.remove_schedule(RemoveScheduleParams(name=row.name))
            assert await backend.fire_schedule(fire_params(row)) is None
            assert (await backend.queue_stats(QueueStatsParams(queue=row.queue))).total == 0

    async def test_each_due_time_fires_exactly_once_among_concurrent_firers(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend, firers(contract, backend, FIRERS) as fleet:
            row = await backend.upsert_schedule(definition())
            for due_time in range(3):
                current = await must_get_schedule(backend, row.name)
                attempts = [fire_params(current) for _ in fleet]
                outcomes = await asyncio.gather(
                    *(peer.fire_schedule(params) for peer, params in zip(fleet, attempts, strict=True))
                )
                winners = [ids for ids in outcomes if ids is not None]
                assert len(winners) == 1, f"due time {due_time}: {len(winners)} of {FIRERS} firers fired"
            assert (await backend.queue_stats(QueueStatsParams(queue=row.queue))).total == 3
            after = await must_get_schedule(backend, row.name)
            assert (after.run_count, after.next_run) == (3, row.next_run + timedelta(minutes=15))

    async def test_schedulers_in_several_processes_enqueue_each_due_time_once(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await backend.upsert_schedule(definition(every_seconds=60.0, cron=None, timezone="UTC"))
            if backend.capabilities.shared_across_processes:
                won = await race_in_processes(
                    contract.factory,
                    contract.namespace_of(backend),
                    row.name,
                    due_times=DUE_TIMES_RACED,
                    processes=FIRING_PROCESSES,
                )
            else:  # an in-process store: the schedulers are tasks on the one store
                loops = [fire_until_done(backend, row.name, DUE_TIMES_RACED) for _ in range(FIRING_PROCESSES)]
                won = [due for part in await asyncio.gather(*loops) for due in part]
            expected = [(row.next_run + STEP * n).isoformat() for n in range(DUE_TIMES_RACED)]
            assert sorted(won) == expected, "some due time was fired twice or never"
            jobs = await backend.job_page(JobPageParams(queues=[row.queue], limit=DUE_TIMES_RACED * 2))
            assert sorted(job.scheduled_at.isoformat() for job in jobs.rows) == expected
            after = await must_get_schedule(backend, row.name)
            assert (after.run_count, after.next_run) == (DUE_TIMES_RACED, row.next_run + STEP * DUE_TIMES_RACED)
