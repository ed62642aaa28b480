"""A result read through soniq_django says what Django's reference ImmediateBackend says for the same task.

Each task runs twice: enqueued on Soniq and run by a real `soniq_worker`, and on Django's
ImmediateBackend (``TASKS["immediate"]`` of the test project). The two results must agree on
status, return value, attempts, arguments and errors: the exception class, and the traceback
text, which is Python's formatted traceback from the task's own first frame. The only lines
allowed to differ are the frames each backend's runner adds on top of the task's:
ImmediateBackend's (django.tasks, asgiref, concurrent.futures) are taken out of its text before
comparing, and Soniq's text must contain none of its own.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import asgiref
import django.tasks
import pytest
from django.tasks import Task, TaskResult, TaskResultStatus
from djproject.testapp import tasks
from djproject.testapp.more_tasks import shout
from workers import WorkerProcess

import soniq
import soniq_django

pytestmark = pytest.mark.usefixtures("soniq_db")

StartWorker = Callable[..., WorkerProcess]

CASES: list[tuple[Task[Any, Any], tuple[Any, ...], dict[str, Any]]] = [
    (tasks.add, (2,), {"b": 3}),
    (tasks.shaped_return_value, (), {}),
    (shout, ("quiet",), {}),
    (tasks.fail, ("This task failed due to ValueError",), {}),
    (tasks.exit_task, ("This task failed due to SystemExit",), {}),
    (tasks.complex_exception, (), {}),
    (tasks.complex_return_value, (), {}),
    (tasks.chained_failure, ("acct-7",), {}),
    (tasks.async_failure, ("This async task failed",), {}),
    (tasks.async_exit, (), {}),
]


def _directories(*modules: ModuleType) -> tuple[str, ...]:
    return tuple(str(Path(module.__file__ or "").parent) + os.sep for module in modules)


_IMMEDIATE_RUNNER = _directories(django.tasks, asgiref, concurrent.futures)
_SONIQ_RUNNER = _directories(soniq, soniq_django)


def frames_from(traceback: str, runner: tuple[str, ...]) -> list[str]:
    """The files of the traceback's frames that lie under `runner`."""
    return [
        line.split('"')[1]
        for line in traceback.splitlines()
        if line.startswith('  File "') and line.split('"')[1].startswith(runner)
    ]


def without_runner_frames(traceback: str, runner: tuple[str, ...]) -> str:
    """`traceback` without the frames (the ``File`` line and the indented lines under it) under `runner`."""
    kept: list[str] = []
    skipping = False
    for line in traceback.splitlines(keepends=True):
        if line.startswith('  File "'):
            skipping = line.split('"')[1].startswith(runner)
        elif not (skipping and line.startswith("    ")):
            skipping = False
        if not skipping:
            kept.append(line)
    return "".join(kept)


def reading(result: TaskResult[Any, Any], *, runner: tuple[str, ...] = ()) -> dict[str, Any]:
    """Everything a user reads off a finished result, with `runner`'s frames left out of tracebacks."""
    try:
        returned: Any = ("returned", result.return_value)
    except ValueError as exc:
        returned = ("return_value raised", str(exc))
    return {
        "status": result.status,
        "is_finished": result.is_finished,
        "attempts": result.attempts,
        "args": result.args,
        "kwargs": result.kwargs,
        "return_value": returned,
        "errors": [
            {
                "exception_class": error.exception_class,
                "exception_class_path": error.exception_class_path,
                "traceback": without_runner_frames(error.traceback, runner),
            }
            for error in result.errors
        ],
    }


@pytest.fixture
def results(start_worker: StartWorker) -> dict[str, tuple[TaskResult[Any, Any], TaskResult[Any, Any]]]:
    """Per task name: (the result read back from Soniq after a worker ran it, ImmediateBackend's result)."""
    queued = [task.enqueue(*args, **kwargs) for task, args, kwargs in CASES]
    worker = start_worker("--run-once")
    assert worker.wait(timeout=60) == 0, worker.log
    out = {}
    for (task, args, kwargs), enqueued in zip(CASES, queued, strict=True):
        immediate = task.using(backend="immediate").enqueue(*args, **kwargs)
        out[task.name] = (task.get_result(enqueued.id), immediate)
    return out


def test_every_result_reads_as_on_the_immediate_backend(
    results: dict[str, tuple[TaskResult[Any, Any], TaskResult[Any, Any]]],
) -> None:
    on_soniq = {name: reading(mine) for name, (mine, _) in results.items()}
    on_immediate = {name: reading(theirs, runner=_IMMEDIATE_RUNNER) for name, (_, theirs) in results.items()}
    assert on_soniq == on_immediate
    for name, (mine, _) in results.items():
        for error in mine.errors:
            assert frames_from(error.traceback, _SONIQ_RUNNER) == [], name


def test_failures_carry_the_tasks_own_exception_and_pythons_traceback(
    results: dict[str, tuple[TaskResult[Any, Any], TaskResult[Any, Any]]],
) -> None:
    expected = {
        "fail": (ValueError, "ValueError: This task failed due to ValueError\n"),
        "exit_task": (SystemExit, "SystemExit: This task failed due to SystemExit\n"),
        "complex_exception": (ValueError, "ValueError: This task failed\n"),
        "complex_return_value": (TypeError, "TypeError: Unsupported type: <class 'function'>\n"),
        "chained_failure": (tasks.ChargeDeclinedError, "ChargeDeclinedError: no card on file for acct-7\n"),
        "async_failure": (RuntimeError, "RuntimeError: This async task failed\n"),
        "async_exit": (SystemExit, "SystemExit: 3\n"),
    }
    for name, (exception_class, last_line) in expected.items():
        mine, _ = results[name]
        assert mine.status == TaskResultStatus.FAILED, name
        with pytest.raises(ValueError, match="Task failed"):
            _ = mine.return_value
        (error,) = mine.errors
        assert error.exception_class is exception_class, name
        assert error.traceback.startswith("Traceback (most recent call last):\n"), error.traceback
        assert error.traceback.endswith(last_line), error.traceback
    assert 'ValueError(ValueError("This task failed"))' in results["complex_exception"][0].errors[0].traceback
    chained = results["chained_failure"][0].errors[0].traceback
    assert "KeyError: 'acct-7'\n\nThe above exception was the direct cause of the following exception:\n" in chained
    assert results["exit_task"][0].errors[0].traceback.count('  File "') == 1  # the task's own frame, nothing above it


def test_return_values_read_as_on_the_immediate_backend(
    results: dict[str, tuple[TaskResult[Any, Any], TaskResult[Any, Any]]],
) -> None:
    assert results["add"][0].return_value == 5
    assert results["shaped_return_value"][0].return_value == {
        "pair": [1, 2],
        "raw": "bytes",
        "nested": [{"none": None, "float": 1.5}],
        "flag": False,
    }
    assert results["shout"][0].return_value == "QUIET"
    for name in ("add", "shaped_return_value", "shout"):
        mine, theirs = results[name]
        assert (mine.status, mine.errors) == (TaskResultStatus.SUCCESSFUL, []), name
        assert mine.return_value == theirs.return_value, name
