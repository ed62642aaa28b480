from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from django.tasks import TaskContext, task


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def fail(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True)
def describe_run(context: TaskContext, tag: str) -> dict[str, Any]:
    return {"attempt": context.attempt, "id": context.task_result.id, "tag": tag}


@task
async def hold(marker: str, seconds: float) -> str:
    """Says it started (the test waits for the file), then takes `seconds`."""
    await asyncio.to_thread(Path(marker).write_text, "started")
    await asyncio.sleep(seconds)
    return "held"


# The tasks of Django's own ImmediateBackend tests (test_like_immediate runs them on both backends).


class ChargeDeclinedError(Exception):
    """An exception class of the task's own module."""


@task
def exit_task(message: str) -> None:
    raise SystemExit(message)


@task
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task
def complex_return_value() -> dict[str, Any]:
    return {"ok": True, "callback": lambda: True}


@task
def shaped_return_value() -> dict[str, Any]:
    return {"pair": (1, 2), "raw": b"bytes", "nested": [{"none": None, "float": 1.5}], "flag": False}


@task
def chained_failure(key: str) -> None:
    cards: dict[str, str] = {}
    try:
        cards[key]
    except KeyError as exc:
        raise ChargeDeclinedError(f"no card on file for {key}") from exc


@task
async def async_failure(message: str) -> None:
    await asyncio.sleep(0)
    raise RuntimeError(message)


@task
async def async_exit() -> None:
    raise SystemExit(3)
