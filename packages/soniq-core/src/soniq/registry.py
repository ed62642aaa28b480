"""The job registry: what `@app.job` records about each function."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from soniq.errors import UnknownJobError
from soniq.outcomes import HandlerKind
from soniq.validation import JobOptionsError


@dataclass(frozen=True, slots=True)
class JobDefinition:
    name: str
    func: Callable[..., Any]
    queue: str
    max_retries: int
    priority: int
    timeout: float | None
    is_async: bool

    @property
    def max_attempts(self) -> int:
        return self.max_retries + 1

    @property
    def handler_kind(self) -> HandlerKind:
        return HandlerKind.ASYNC if self.is_async else HandlerKind.SYNC


def default_job_name(func: Callable[..., Any]) -> str:
    return f"{func.__module__}.{func.__qualname__}"


def validate_job_options(*, name: str, queue: str, max_retries: int, priority: int, timeout: float | None) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"job name must be a non-empty string, got {name!r}")
    if not isinstance(queue, str) or not queue:
        raise ValueError(f"job queue must be a non-empty string, got {queue!r}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ValueError(f"max_retries must be a whole number >= 0, got {max_retries!r}")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"priority must be a whole number, got {priority!r}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")


class JobRegistry:
    def __init__(self) -> None:
        self._jobs: dict[str, JobDefinition] = {}

    def add(
        self,
        func: Callable[..., Any],
        *,
        name: str | None,
        queue: str,
        max_retries: int,
        priority: int,
        timeout: float | None,
    ) -> JobDefinition:
        if not callable(func):
            raise TypeError(f"@app.job decorates a function, got {func!r}")
        if name is None and getattr(func, "__module__", None) == "__main__":
            raise JobOptionsError(
                f"job {func.__qualname__!r} is defined in a script run as __main__, so its default name would be "
                f"'__main__.{func.__qualname__}', and a worker imports jobs by module name, never as __main__: it "
                "could not find the code and would dead-letter every run. Move the job into an importable module "
                f"(and start the worker with --jobs-modules that.module), or give it an explicit name: "
                f"@app.job(name={func.__qualname__!r}) and register the same name in the worker's jobs module"
            )
        job_name = name or default_job_name(func)
        validate_job_options(name=job_name, queue=queue, max_retries=max_retries, priority=priority, timeout=timeout)
        existing = self._jobs.get(job_name)
        if existing is not None and existing.func is not func:
            raise ValueError(f"a job named {job_name!r} is already registered ({default_job_name(existing.func)})")
        definition = JobDefinition(
            name=job_name,
            func=func,
            queue=queue,
            max_retries=max_retries,
            priority=priority,
            timeout=float(timeout) if timeout is not None else None,
            is_async=inspect.iscoroutinefunction(func),
        )
        self._jobs[job_name] = definition
        return definition

    def get(self, name: str) -> JobDefinition | None:
        return self._jobs.get(name)

    def require(self, name: str) -> JobDefinition:
        definition = self._jobs.get(name)
        if definition is None:
            known = ", ".join(sorted(self._jobs)) or "none"
            raise UnknownJobError(f"no job is registered under the name {name!r}; registered jobs: {known}")
        return definition

    def find_by_function(self, func: Callable[..., Any]) -> JobDefinition | None:
        for definition in self._jobs.values():
            if definition.func is func:
                return definition
        return None

    def names(self) -> list[str]:
        return sorted(self._jobs)

    def modules(self) -> set[str]:
        return {d.func.__module__ for d in self._jobs.values()}

    def __len__(self) -> int:
        return len(self._jobs)
