"""Running Django tasks as Soniq jobs.

Each Django task is one Soniq job named by the task's ``module_path``. A task
becomes known to its backend when it is defined (``Task.__post_init__`` calls
``validate_task``), so a worker imports the ``tasks`` module of every
installed app plus ``OPTIONS["TASK_MODULES"]`` and registers what it found.
A row whose task the worker never imported is dead-lettered by core as an
unknown job, visible in the admin.

An ``async def`` task runs on the worker's event loop (so the shutdown
contract's async branch applies: past ``shutdown_timeout`` it is cancelled
and nack'd); a plain ``def`` task runs in Soniq's bounded sync thread pool.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from inspect import iscoroutinefunction
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.tasks import Task, TaskContext
from django.utils.json import normalize_json
from django.utils.module_loading import autodiscover_modules

from soniq import Soniq
from soniq_django.config import BackendConfig

_known: dict[str, dict[str, Task[Any, Any]]] = {}
_known_lock = threading.Lock()

# A failure's last_error starts with this class name, then the exception's class path, then the traceback.
_TRACEBACK_LIMIT = 3500


class TaskRaisedError(Exception):
    """A Django task raised; carries the original class path and traceback to the job's ``last_error``."""

    def __init__(self, exc: BaseException) -> None:
        kind = type(exc)
        self.exception_class_path = f"{kind.__module__}.{kind.__qualname__}"
        text = "".join(traceback.format_exception(exc))
        super().__init__(f"{self.exception_class_path}\n{text[-_TRACEBACK_LIMIT:]}")


def remember_task(alias: str, task: Task[Any, Any]) -> None:
    with _known_lock:
        _known.setdefault(alias, {})[task.module_path] = task


def known_tasks(alias: str) -> dict[str, Task[Any, Any]]:
    with _known_lock:
        return dict(_known.get(alias, {}))


def discover_tasks(config: BackendConfig) -> dict[str, Task[Any, Any]]:
    """Import every installed app's ``tasks`` module and ``TASK_MODULES``; the tasks of this alias."""
    autodiscover_modules("tasks")
    for module in config.task_modules:
        __import__(module)
    return known_tasks(config.alias)


def register_tasks(app: Soniq, config: BackendConfig) -> list[str]:
    """Register every known task of `config.alias` on `app`; returns their job names."""
    names = []
    for name, task in sorted(discover_tasks(config).items()):
        app.job(name=name, queue=task.queue_name, max_retries=config.max_retries)(job_for_task(task, config))
        names.append(name)
    return names


def _context(task: Task[Any, Any], result_id: str, config: BackendConfig) -> TaskContext[Any, Any]:
    from soniq_django.results import result_for

    return TaskContext(task_result=result_for(task, result_id, config, running=True))


def job_for_task(task: Task[Any, Any], config: BackendConfig) -> Callable[..., Any]:
    """The Soniq handler that runs `task` with the positional and keyword arguments it was enqueued with."""
    if iscoroutinefunction(task.func):

        async def run_async_task(*, args: list[Any], kwargs: dict[str, Any], result_id: str) -> Any:
            call_args = list(args)
            if task.takes_context:
                call_args.insert(0, await sync_to_async(_context)(task, result_id, config))
            try:
                value = await task.func(*call_args, **kwargs)
            except Exception as exc:
                raise TaskRaisedError(exc) from exc
            return normalize_json(value)

        return run_async_task

    def run_sync_task(*, args: list[Any], kwargs: dict[str, Any], result_id: str) -> Any:
        # Soniq's pool threads live long: give each run fresh Django connections, as a request would.
        close_old_connections()
        try:
            call_args = list(args)
            if task.takes_context:
                call_args.insert(0, _context(task, result_id, config))
            try:
                value = task.func(*call_args, **kwargs)
            except Exception as exc:
                raise TaskRaisedError(exc) from exc
            return normalize_json(value)
        finally:
            close_old_connections()

    return run_sync_task
