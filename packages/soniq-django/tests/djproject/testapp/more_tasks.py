"""Not a `tasks` module: the worker finds it through OPTIONS["TASK_MODULES"]."""

from __future__ import annotations

from django.tasks import task


@task(queue_name="emails", priority=50)
async def shout(text: str) -> str:
    return text.upper()
