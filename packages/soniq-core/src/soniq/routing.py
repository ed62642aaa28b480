"""Producing jobs another service runs: `TaskRef`, name checks, `route_map` and `producer_id`.

A producer often cannot import the consumer's handlers. It enqueues by name (a string or a
`TaskRef`), and `enqueue_validation` says what happens when no local job has that name:
``strict`` refuses, ``warn`` logs and stores, ``none`` stores. A `TaskRef` is always
stored: declaring one is the producer saying the name is meant.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from soniq.errors import InvalidTaskNameError as InvalidTaskNameError
from soniq.errors import SoniqError
from soniq.errors import TaskArgsError as TaskArgsError
from soniq.registry import MAX_JOB_VERSION, JobDefinition
from soniq.validation import JobOptionsError, check_queue_name

if TYPE_CHECKING:
    from soniq.settings import Settings

logger = logging.getLogger("soniq.producer")

DEFAULT_QUEUE = "default"
DEFAULT_MAX_RETRIES = 3
DEFAULT_PRIORITY = 100
WARN_INTERVAL_SECONDS = 60.0


def check_task_name(name: str, pattern: str | None) -> str:
    """`name` when it matches `pattern` (None: any non-empty name), else `InvalidTaskNameError`."""
    if not isinstance(name, str) or not name:
        raise InvalidTaskNameError(f"a job name must be a non-empty string, got {name!r}")
    if pattern is not None and re.fullmatch(pattern, name) is None:
        raise InvalidTaskNameError(
            f"job name {name!r} does not match task_name_pattern {pattern!r}",
            suggestion="rename the job, or set task_name_pattern (SONIQ_TASK_NAME_PATTERN) to your convention",
        )
    return name


@dataclasses.dataclass(frozen=True, slots=True)
class TaskRef:
    """A job of another service, named without importing it: ``app.enqueue(ref, **kwargs)``.

    With `args_model` (a pydantic model) the arguments are checked before the row is
    written; with `default_queue` the row goes there unless the call passes ``queue=``.
    """

    name: str
    args_model: type[Any] | None = None
    default_queue: str | None = None
    version: int = 1
    """The version of the job's code the producer shapes its arguments for; rows it enqueues
    carry it (above 1 only on a backend with the `VersionedJobs` role)."""

    def __post_init__(self) -> None:
        check_task_name(self.name, None)
        check_ref_version(self.version)
        if self.default_queue is not None:
            check_queue_name(self.default_queue, what="TaskRef default_queue")

    def with_default_queue(self, queue: str) -> TaskRef:
        """A copy that goes to `queue` by default."""
        return dataclasses.replace(self, default_queue=queue)


def task_ref(
    *,
    name: str,
    args_model: type[Any] | None = None,
    default_queue: str | None = None,
    pattern: str | None = None,
    version: int = 1,
) -> TaskRef:
    """A `TaskRef` whose name is checked now against `pattern` (default: ``SONIQ_TASK_NAME_PATTERN``)."""
    if pattern is None:
        pattern = os.environ.get("SONIQ_TASK_NAME_PATTERN") or None
    check_task_name(name, pattern)
    return TaskRef(name=name, args_model=args_model, default_queue=default_queue, version=version)


def check_ref_version(version: Any) -> int:
    """A `TaskRef`'s `version`: a whole number from 1 to `MAX_JOB_VERSION`, else `JobOptionsError`."""
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_JOB_VERSION:
        raise JobOptionsError(f"TaskRef version must be a whole number from 1 to {MAX_JOB_VERSION}, got {version!r}")
    return version


def validate_ref_args(ref: TaskRef, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments as `ref.args_model` accepts them (JSON-ready), or `TaskArgsError`."""
    if ref.args_model is None:
        return kwargs
    try:
        model = ref.args_model.model_validate(kwargs)
    except Exception as exc:  # pydantic.ValidationError, without importing pydantic here
        raise TaskArgsError(f"arguments for {ref.name!r} do not match {ref.args_model.__name__}: {exc}") from None
    dumped: dict[str, Any] = model.model_dump(mode="json")
    return dumped


def routed_queue(settings: Settings, name: str, queue: str) -> str:
    """`queue`, or for a job left on the default queue the `route_map` queue of its longest prefix."""
    if queue != DEFAULT_QUEUE or not settings.route_map:
        return queue
    for prefix, target in settings.route_map:  # sorted longest first by the settings parser
        if name.startswith(prefix):
            return target
    return queue


def remote_definition(settings: Settings, name: str, default_queue: str | None, version: int = 1) -> JobDefinition:
    """What a row for a job no local handler registers is built from (0.1.0's defaults)."""

    def not_here(**_: Any) -> None:
        raise SoniqError(f"job {name!r} is run by another service; this app only enqueues it")

    return JobDefinition(
        name=name,
        func=not_here,
        queue=default_queue or routed_queue(settings, name, DEFAULT_QUEUE),
        max_retries=DEFAULT_MAX_RETRIES,
        priority=DEFAULT_PRIORITY,
        timeout=None,
        is_async=False,
        version=version,
    )


class UnknownNameWarnings:
    """``enqueue_validation=warn``: one warning per name per `WARN_INTERVAL_SECONDS`."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def warn(self, name: str) -> None:
        now = time.monotonic()
        last = self._last.get(name)
        if last is not None and now - last < WARN_INTERVAL_SECONDS:
            return
        self._last[name] = now
        logger.warning(
            "enqueueing %r, which no job of this app registers (enqueue_validation=warn); "
            "a worker of another service must run it",
            name,
        )


_auto_producer_id: str | None = None


def resolve_producer_id(configured: str) -> str:
    """`configured`, or for ``auto`` ``<hostname>:<pid>:<program>`` of this process."""
    global _auto_producer_id
    if configured != "auto":
        return configured
    pid = os.getpid()
    if _auto_producer_id is None or not _auto_producer_id.endswith(f":{pid}:{_program()}"):
        _auto_producer_id = f"{platform.node() or 'unknown-host'}:{pid}:{_program()}"
    return _auto_producer_id


def _program() -> str:
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"


__all__ = [
    "InvalidTaskNameError",
    "TaskArgsError",
    "TaskRef",
    "UnknownNameWarnings",
    "check_task_name",
    "remote_definition",
    "resolve_producer_id",
    "routed_queue",
    "task_ref",
]
