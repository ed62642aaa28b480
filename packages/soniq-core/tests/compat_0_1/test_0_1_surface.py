"""The names soniq 0.1.0's own public-API tests use still exist and mean what they meant.

`conftest.py` beside this module runs it on every backend. `app.is_closed`, and
`app.scheduler.start()` / `stop()` / `running` with 0.1.0's meaning: the scheduler loop runs
in the background of this process and enqueues each due schedule.
"""

from __future__ import annotations

from typing import Any

import pytest

from soniq import Soniq
from soniq.testing import make_app, wait_until

pytestmark = pytest.mark.asyncio


async def test_is_closed_is_false_until_close_then_true() -> None:
    app = make_app()
    assert app.is_closed is False
    await app.ensure_initialized()
    assert app.is_closed is False
    await app.close()
    assert app.is_closed is True
    assert app.is_initialized is False


async def test_is_closed_after_closing_an_app_that_never_connected_and_after_async_with() -> None:
    never_used = make_app()
    await never_used.close()
    assert never_used.is_closed is True

    async with make_app() as app:
        assert app.is_closed is False
    assert app.is_closed is True


async def _jobs_named(app: Soniq, name: str) -> list[dict[str, Any]]:
    return [job for job in await app.list_jobs() if job["job_name"] == name]


async def test_scheduler_start_enqueues_due_schedules_in_the_background_until_stop() -> None:
    app = make_app()

    @app.job(name="reports.tick")
    async def tick() -> None: ...

    await app.scheduler.add("reports.tick", every=1)
    assert app.scheduler.running is False
    await app.scheduler.start(check_interval=1)
    assert app.scheduler.running is True
    assert app.scheduler.check_interval == 1
    await app.scheduler.start()  # already running: nothing changes
    assert app.scheduler.check_interval == 1

    fired = await wait_until(lambda: _jobs_named(app, "reports.tick"), timeout=15)
    assert fired[0]["status"] == "queued"
    schedule = await app.scheduler.get("reports.tick")
    assert schedule is not None
    assert schedule["last_job_id"] == fired[-1]["id"]

    await app.scheduler.stop()
    assert app.scheduler.running is False
    await app.scheduler.stop()  # stopping a stopped scheduler is a no-op
    await app.close()


async def test_scheduler_start_stores_the_periodic_schedules_and_close_stops_it() -> None:
    app = make_app()

    @app.periodic(every=3600, name="cleanup.hourly")
    async def hourly() -> None: ...

    await app.scheduler.start()
    assert app.scheduler.running is True
    stored = await app.scheduler.get("cleanup.hourly")
    assert stored is not None
    assert (stored["schedule_type"], stored["schedule_value"], stored["status"]) == ("interval", "3600", "active")

    await app.close()
    assert app.scheduler.running is False
    assert app.is_closed is True
