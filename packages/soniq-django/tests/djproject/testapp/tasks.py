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
