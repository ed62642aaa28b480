"""``soniq_django.SoniqBackend``: Django's tasks framework on Soniq's queue.

Priority: Django's runs from -100 to 100, higher first; Soniq's is any whole
number, lower first, 100 by default. A task's Soniq priority is
``100 - django_priority``, so Django's default 0 is Soniq's default 100, and
Django 100 (most urgent) is Soniq 0, Django -100 is Soniq 200.

Transactions: the job row is written on the Django connection of
``OPTIONS["DATABASE"]``. Inside ``transaction.atomic()`` it is part of that
transaction: invisible to workers until the commit, gone with a rollback,
which is what ``transaction.on_commit(lambda: task.enqueue(...))`` gives,
except that the result id is known at once. Outside a transaction the row is
committed before ``enqueue`` returns.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import InvalidTask
from django.tasks.signals import task_enqueued
from django.utils.json import normalize_json

from soniq_django.config import BackendConfig
from soniq_django.execution import remember_task
from soniq_django.results import result_for
from soniq_django.rows import JobRow, insert_job

SONIQ_DEFAULT_PRIORITY = 100


def soniq_priority(django_priority: int) -> int:
    """Django's priority (-100..100, higher first) as Soniq's (lower first)."""
    return SONIQ_DEFAULT_PRIORITY - django_priority


class SoniqBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.config = BackendConfig.from_options(alias, self.options)

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        # Every task of this backend passes here when it is defined: that is how a worker finds them.
        remember_task(self.alias, task)

    def enqueue(self, task: Task[Any, Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> TaskResult[Any, Any]:
        self.validate_task(task)
        result_id = str(uuid.uuid4())
        call_args = cast("list[Any]", normalize_json(list(args)))
        call_kwargs = cast("dict[str, Any]", normalize_json(dict(kwargs)))
        if not all(isinstance(key, str) for key in call_kwargs):
            raise InvalidTask("task keyword arguments must have string names")
        now = datetime.now(UTC)
        insert_job(
            self.config.database,
            JobRow(
                id=result_id,
                job_name=task.module_path,
                args={"args": call_args, "kwargs": call_kwargs, "result_id": result_id},
                queue=task.queue_name,
                priority=soniq_priority(task.priority),
                scheduled_at=task.run_after.astimezone(UTC) if task.run_after else now,
                max_attempts=self.config.max_attempts,
            ),
        )
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=result_id,
            status=TaskResultStatus.READY,
            enqueued_at=now,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=call_args,
            kwargs=call_kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        return result_for(None, str(result_id), self.config)
