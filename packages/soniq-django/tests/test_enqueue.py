"""Enqueueing through Django's API writes a row core reads back, inside or outside `atomic()`."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from djproject.testapp.more_tasks import shout
from djproject.testapp.tasks import add, hold

from soniq import Soniq
from soniq_django.config import database_url
from soniq_django.models import Job

pytestmark = pytest.mark.usefixtures("soniq_db")


def core_job(job_id: str) -> dict[str, Any] | None:
    """The row as Soniq's own backend reads it, on its own connection."""

    async def read() -> dict[str, Any] | None:
        async with Soniq(database_url()) as app:
            return await app.get_job(job_id)

    return asyncio.run(read())


def test_enqueue_outside_atomic_is_committed_and_core_reads_every_field() -> None:
    result = add.enqueue(2, b=3)

    row = core_job(result.id)
    assert row is not None
    assert row["job_name"] == "djproject.testapp.tasks.add"
    assert row["status"] == "queued"
    assert row["args"] == {"args": [2], "kwargs": {"b": 3}, "result_id": result.id}
    assert (row["queue"], row["priority"], row["attempts"], row["max_attempts"]) == ("default", 100, 0, 1)
    assert row["worker_id"] is None
    assert row["last_error"] is None
    assert result.status == TaskResultStatus.READY
    assert add.get_result(result.id).status == TaskResultStatus.READY


class AbandonError(Exception):
    pass


def test_rollback_means_the_job_never_existed() -> None:
    enqueued = []
    try:
        with transaction.atomic():
            enqueued.append(add.enqueue(1, 1))
            # Visible on the transaction's own connection ...
            assert Job.objects.filter(pk=enqueued[0].id).exists()
            raise AbandonError
    except AbandonError:
        pass
    (result,) = enqueued

    assert not Job.objects.filter(pk=result.id).exists()
    assert core_job(result.id) is None
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result.id)


def test_commit_publishes_the_job_to_other_connections_only_then() -> None:
    with transaction.atomic():
        result = add.enqueue(1, 2)
        assert core_job(result.id) is None
    row = core_job(result.id)
    assert row is not None
    assert row["status"] == "queued"


def test_priority_queue_and_run_after_map_onto_the_row() -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    urgent = add.using(priority=100, queue_name="emails").enqueue(1, 2)
    deferred = add.using(priority=-100, run_after=later).enqueue(1, 2)
    decorated = shout.enqueue("hi")

    assert core_job(urgent.id) is not None
    assert (core_job(urgent.id) or {})["priority"] == 0
    assert (core_job(urgent.id) or {})["queue"] == "emails"
    deferred_row = core_job(deferred.id) or {}
    assert deferred_row["priority"] == 200
    assert abs(deferred_row["scheduled_at"] - later) < timedelta(milliseconds=1)
    assert ((core_job(decorated.id) or {})["priority"], (core_job(decorated.id) or {})["queue"]) == (50, "emails")


def test_django_validation_still_applies() -> None:
    with pytest.raises(InvalidTask, match="priority"):
        add.using(priority=101)
    with pytest.raises(InvalidTask, match="Queue"):
        add.using(queue_name="nowhere")
    with pytest.raises(InvalidTask, match="aware"):
        hold.using(run_after=datetime(2030, 1, 1))
    assert default_task_backend.supports_defer
    assert default_task_backend.supports_async_task
    assert default_task_backend.supports_get_result
    assert default_task_backend.supports_priority
