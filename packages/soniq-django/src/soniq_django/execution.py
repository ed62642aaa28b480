"""Running Django tasks as Soniq jobs.

Each Django task is one Soniq job named by the task's ``module_path``. A task
becomes known to its backend when it is defined (``Task.__post_init__`` calls
``validate_task``), so a worker imports the ``tasks`` module of every
installed app plus ``OPTIONS["TASK_MODULES"]`` and registers what it found.
A row whose task the worker never imported is dead-lettered by core as an
unknown job, visible in the admin.

A task that raises anything but ``KeyboardInterrupt`` (``SystemExit`` included), or returns what
JSON cannot hold, fails as it does on Django's ImmediateBackend: the result's error names the
exception's own class and carries Python's formatted traceback from the task's first frame.

An ``async def`` task runs on the worker's event loop (so the shutdown
contract's async branch applies: past ``shutdown_timeout`` it is cancelled
and nack'd); a plain ``def`` task runs in Soniq's bounded sync thread pool.
"""

from __future__ import annotations

import asyncio
import json
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

ERROR_MARKER = " ::django-task-error:: "
"""Between a failed run's one-line summary and the JSON ``[class path, traceback]`` `results` reads back."""
_TRACEBACK_LIMIT = 5000
"""Characters of JSON the traceback may take. Soniq keeps 8192 characters of ``last_error``, its summary
line first: one that fits is never cut, so the traceback can be read back whole."""
_MESSAGE_LIMIT = 200
_PASS_THROUGH = (KeyboardInterrupt, asyncio.CancelledError)
"""Not the task's failure: Ctrl-C (Django's ImmediateBackend lets it through too) and Soniq's own
cancellation (a timeout, or a shutdown past its budget), which core settles itself."""


def task_traceback(exc: BaseException) -> str:
    """`exc` formatted as Python formats it, from the task's first frame: this module's frames are left out."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__") == __name__:
        tb = tb.tb_next
    return "".join(traceback.TracebackException(type(exc), exc, tb).format())


def _fitted(text: str) -> str:
    """`text`, or its innermost frames behind a line that says the outer ones were cut, as JSON of at
    most `_TRACEBACK_LIMIT` characters."""
    keep = len(text)
    while True:
        fitted = text if keep >= len(text) else f"[... outer frames cut ...]\n{text[len(text) - keep :]}"
        if len(json.dumps(fitted)) <= _TRACEBACK_LIMIT or keep == 0:
            return fitted
        keep = min(keep, _TRACEBACK_LIMIT) * 4 // 5


class TaskRaisedError(Exception):
    """A Django task raised (or returned what JSON cannot hold).

    Its message is one line: the exception's class path and message, then `ERROR_MARKER` and the
    JSON ``[class path, traceback]``, ASCII only, so it reaches ``last_error`` unchanged whatever
    Soniq does to line breaks or other characters there.
    """

    def __init__(self, exc: BaseException) -> None:
        kind = type(exc)
        self.exception_class_path = f"{kind.__module__}.{kind.__qualname__}"
        self.traceback = task_traceback(exc)
        try:
            message = str(exc)
        except Exception:  # a broken __str__ in the task's own exception must not hide its failure
            message = "<str() of the exception failed>"
        summary = " ".join(message.split())[:_MESSAGE_LIMIT]
        payload = json.dumps([self.exception_class_path, _fitted(self.traceback)])
        super().__init__(f"{self.exception_class_path}: {summary}{ERROR_MARKER}{payload}")


def read_task_error(text: str) -> tuple[str, str] | None:
    """The class path and traceback a `TaskRaisedError` left in `text` (a ``last_error``), if any."""
    decoder = json.JSONDecoder()
    start = text.find(ERROR_MARKER)
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start + len(ERROR_MARKER))
        except ValueError:
            value = None
        if isinstance(value, list) and len(value) == 2 and all(isinstance(part, str) for part in value):
            return value[0], value[1]
        start = text.find(ERROR_MARKER, start + 1)
    return None


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
                # Inside the try, as in Django's ImmediateBackend: a return value JSON cannot hold fails the task.
                return normalize_json(await task.func(*call_args, **kwargs))
            except _PASS_THROUGH:
                raise
            except BaseException as exc:
                raise TaskRaisedError(exc) from None

        return run_async_task

    def run_sync_task(*, args: list[Any], kwargs: dict[str, Any], result_id: str) -> Any:
        # Soniq's pool threads live long: give each run fresh Django connections, as a request would.
        close_old_connections()
        try:
            call_args = list(args)
            if task.takes_context:
                call_args.insert(0, _context(task, result_id, config))
            try:
                return normalize_json(task.func(*call_args, **kwargs))
            except _PASS_THROUGH:
                raise
            except BaseException as exc:
                raise TaskRaisedError(exc) from None
        finally:
            close_old_connections()

    return run_sync_task
