"""`JobContext`: what a running handler may know about its own run."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, get_type_hints


@dataclass(frozen=True, slots=True)
class JobContext:
    """The run of a job, passed to the handler parameter annotated ``JobContext``.

    `attempt` is 1-based and counts this run; a snoozed run does not use one up.
    """

    job_id: str
    job_name: str
    attempt: int
    max_attempts: int
    queue: str
    worker_id: str = ""
    scheduled_at: datetime | None = None
    created_at: datetime | None = None


def context_parameter(func: Callable[..., Any]) -> str | None:
    """The name of `func`'s parameter annotated `JobContext` (string annotations included), if any."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    hints: dict[str, Any] = {}
    for name, parameter in signature.parameters.items():
        annotation = parameter.annotation
        if annotation is JobContext:
            return name
        if isinstance(annotation, str):
            if not hints:
                try:
                    hints = get_type_hints(func)
                except Exception:
                    hints = {"": None}
            if hints.get(name) is JobContext or annotation.rsplit(".", 1)[-1] == "JobContext":
                return name
    return None
