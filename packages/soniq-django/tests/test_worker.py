"""`python manage.py soniq_worker` as a real process: results through Django's API, and SIGTERM mid-job."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection
from django.tasks import TaskResultStatus, default_task_backend
from djproject.testapp.more_tasks import shout
from djproject.testapp.tasks import add, describe_run, fail, hold
from workers import WorkerProcess, wait_until

from soniq import Soniq
from soniq_django.config import url_for_settings
from soniq_django.models import Job

pytestmark = pytest.mark.usefixtures("soniq_db")

StartWorker = Callable[..., WorkerProcess]


def test_worker_runs_tasks_and_results_read_back_through_django(start_worker: StartWorker) -> None:
    summed = add.enqueue(2, b=3)
    failed = fail.enqueue("boom")
    described = describe_run.enqueue(tag="x")
    shouted = shout.enqueue("quiet")  # an async task, found through OPTIONS["TASK_MODULES"]

    worker = start_worker("--run-once")
    assert worker.wait(timeout=60) == 0, worker.log

    done = add.get_result(summed.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 5
    assert done.is_finished
    assert done.attempts == 1
    assert done.enqueued_at is not None
    assert done.finished_at is not None

    failure = default_task_backend.get_result(failed.id)
    assert failure.status == TaskResultStatus.FAILED
    assert failure.task.func == fail.func
    assert failure.errors[0].exception_class is ValueError
    assert "boom" in failure.errors[0].traceback
    with pytest.raises(ValueError, match="failed"):
        _ = failure.return_value

    assert describe_run.get_result(described.id).return_value == {"attempt": 1, "id": described.id, "tag": "x"}
    assert shout.get_result(shouted.id).return_value == "QUIET"

    # refresh() goes through the same path as get_result.
    summed.refresh()
    assert summed.status == TaskResultStatus.SUCCESSFUL


def test_sigterm_past_shutdown_timeout_nacks_the_async_task(start_worker: StartWorker, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    result = hold.enqueue(str(marker), 3600)
    worker = start_worker(SONIQ_SHUTDOWN_TIMEOUT="1")
    wait_until(marker.exists, timeout=30, what="the task to start")
    wait_until(lambda: Job.objects.get(pk=result.id).status == "processing", timeout=10, what="the row to be claimed")

    signalled = time.monotonic()
    worker.terminate()
    assert worker.wait(timeout=20) == 0, worker.log
    elapsed = time.monotonic() - signalled

    row = Job.objects.get(pk=result.id)
    assert (row.status, row.attempts, row.worker_id) == ("queued", 0, None), worker.log
    assert row.last_error is None
    # Bounded by shutdown_timeout (1s) plus process exit, nowhere near the task's hour.
    assert elapsed < 10, worker.log
    assert "FORCE_TIMEOUT_PATH" in worker.log
    assert hold.get_result(result.id).status == TaskResultStatus.READY


def test_sigterm_lets_a_task_within_the_budget_finish(start_worker: StartWorker, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    result = hold.enqueue(str(marker), 1.0)
    worker = start_worker(SONIQ_SHUTDOWN_TIMEOUT="20")
    wait_until(marker.exists, timeout=30, what="the task to start")

    worker.terminate()
    assert worker.wait(timeout=30) == 0, worker.log

    row = Job.objects.get(pk=result.id)
    assert (row.status, row.attempts, row.worker_id) == ("done", 0, None), worker.log
    finished = hold.get_result(result.id)
    assert finished.status == TaskResultStatus.SUCCESSFUL
    assert finished.return_value == "held"
    assert "FORCE_TIMEOUT_PATH" not in worker.log


def test_a_second_sigterm_while_draining_forces_the_timeout_path(start_worker: StartWorker, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    result = hold.enqueue(str(marker), 3600)
    worker = start_worker(SONIQ_SHUTDOWN_TIMEOUT="60")
    wait_until(marker.exists, timeout=30, what="the task to start")

    signalled = time.monotonic()
    worker.terminate()
    wait_until(lambda: "-> DRAINING" in worker.log, timeout=10, what="the worker to start draining")
    worker.terminate()
    assert worker.wait(timeout=20) == 0, worker.log

    # Well inside the 60s budget: the second signal skipped the rest of DRAINING.
    assert time.monotonic() - signalled < 20
    row = Job.objects.get(pk=result.id)
    assert (row.status, row.attempts, row.worker_id) == ("queued", 0, None), worker.log


def _pause_store_call(method: str, queue: str) -> object:
    """Call `app.<method>(queue)` on a Soniq app over Django's own database, as `soniq queue` would."""
    url = url_for_settings(connection.settings_dict, vendor=connection.vendor)

    async def call() -> object:
        async with Soniq(url, observers="") as app:
            return await getattr(app, method)(queue)

    return asyncio.run(call())


def test_a_paused_queue_holds_django_tasks_until_resumed(start_worker: StartWorker) -> None:
    assert _pause_store_call("pause_queue", "default") is True
    held = add.enqueue(20, b=22)  # Django's tables still take the task

    worker = start_worker("--run-once")
    assert worker.wait(timeout=60) == 0, worker.log
    assert add.get_result(held.id).status == TaskResultStatus.READY
    row = Job.objects.get(id=held.id)
    assert (row.status, row.attempts) == ("queued", 0)

    assert _pause_store_call("resume_queue", "default") is True
    worker = start_worker("--run-once")
    assert worker.wait(timeout=60) == 0, worker.log
    assert add.get_result(held.id).return_value == 42
