"""Resumable jobs: `ctx.step`, `ctx.checkpoint` and `ctx.last_checkpoint` (see `JobContext`).

A step's result and the last checkpoint are stored with the job (the `JobStepStore` role) and
come back in the claimed row, so a re-run of the same job id (after a nack at shutdown, stale
recovery or a retry) skips the steps already done and starts from the last checkpoint. Every
write is fenced like the worker's other writes: a worker that no longer owns the row writes
nothing and the handler gets `JobOwnershipLostError`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from soniq.backend import JobStepStore, require_role
from soniq.errors import InvalidStepNameError, JobOwnershipLostError, StepValueError, StepValueTooLargeError
from soniq.params import SaveCheckpointParams, SaveStepParams
from soniq.serialization import MAX_RESULT_BYTES
from soniq.speedups import loads

MAX_STEP_NAME_CHARS = 200
"""The longest step name, in characters."""

FEATURE = "resumable steps (ctx.step / ctx.checkpoint)"


def check_step_name(name: object) -> str:
    """`name` when it is a usable step name, else `InvalidStepNameError` saying why."""
    if not isinstance(name, str):
        raise InvalidStepNameError(f"a step name must be a string, got {type(name).__name__} {name!r}")
    if not name:
        raise InvalidStepNameError("a step name must not be empty")
    if len(name) > MAX_STEP_NAME_CHARS:
        raise InvalidStepNameError(
            f"a step name must be at most {MAX_STEP_NAME_CHARS} characters, got {len(name)} ({name[:40]!r}...)"
        )
    if "\x00" in name:
        raise InvalidStepNameError(f"a step name must not contain a NUL character, got {name!r}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidStepNameError(
            f"a step name must not contain a lone surrogate ({name[exc.start : exc.end]!a}), got {name!a}"
        ) from None
    return name


def encode_value(what: str, value: Any, *, max_bytes: int) -> tuple[str, Any]:
    """`value` as the JSON text a store keeps and the value a re-run would read back.

    `StepValueError` for anything that is not JSON (or holds what no store accepts), and
    `StepValueTooLargeError` for JSON over `max_bytes` (the setting `max_result_bytes`)."""
    try:
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        raise StepValueError(f"{what} is nested too deeply to store as JSON") from None
    except (TypeError, ValueError) as exc:
        raise StepValueError(f"{what} is not JSON-serialisable: {exc}") from None
    try:
        size = len(encoded.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise StepValueError(
            f"{what} contains a lone surrogate ({encoded[exc.start : exc.end]!a}), which no store accepts"
        ) from None
    if _has_escaped_nul(encoded):
        raise StepValueError(f"{what} contains a NUL character (\\x00) in a string, which PostgreSQL refuses")
    if size > max_bytes:
        raise StepValueTooLargeError(
            f"{what} is {size} bytes as JSON, over the limit of {max_bytes} bytes (setting 'max_result_bytes', "
            "environment variable SONIQ_MAX_RESULT_BYTES)"
        )
    try:
        return encoded, loads(encoded)
    except RecursionError:
        raise StepValueError(f"{what} is nested too deeply to store as JSON") from None


def _has_escaped_nul(encoded: str) -> bool:
    """True when the JSON text holds an escaped NUL (``\\u0000`` not preceded by an odd run of backslashes)."""
    start = 0
    while True:
        index = encoded.find("\\u0000", start)
        if index < 0:
            return False
        backslashes = 0
        probe = index - 1
        while probe >= 0 and encoded[probe] == "\\":
            backslashes += 1
            probe -= 1
        if backslashes % 2 == 0:
            return True
        start = index + 1


class JobSteps:
    """The steps and checkpoint of one run of one job, as its `JobContext` uses them.

    Built by the worker from the claimed row (`JobRecord.steps` and `.checkpoint`); with no
    backend (a `JobContext` made by hand, in a test) the values live only in this object."""

    def __init__(
        self,
        *,
        backend: object | None = None,
        job_id: str = "",
        worker_id: str = "",
        steps: Mapping[str, Any] | None = None,
        checkpoint: Any = None,
        max_bytes: int = MAX_RESULT_BYTES,
    ) -> None:
        self._backend = backend
        self._store: JobStepStore | None = None
        self._job_id = job_id
        self._worker_id = worker_id
        self._done: dict[str, Any] = dict(steps or {})
        self._max_bytes = max_bytes
        self.last_checkpoint: Any = checkpoint

    def _role(self) -> JobStepStore | None:
        if self._backend is None:
            return None
        if self._store is None:
            protocol: Any = JobStepStore  # a protocol class in the call trips mypy's type-abstract check
            self._store = require_role(self._backend, protocol, FEATURE)
        return self._store

    @property
    def completed(self) -> dict[str, Any]:
        """The completed steps seen by this run, by name (a copy)."""
        return dict(self._done)

    async def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` unless this job already completed the step `name`; store and
        return its result (the stored value, decoded, when the step was done before)."""
        check_step_name(name)
        if not callable(fn):
            raise TypeError(f"ctx.step({name!r}, fn): fn must be callable, got {fn!r}")
        if name in self._done:
            return self._done[name]
        store = self._role()  # a missing role is reported before fn runs
        if inspect.iscoroutinefunction(fn):
            result = await fn(*args, **kwargs)
        else:
            context = contextvars.copy_context()
            result = await asyncio.to_thread(context.run, functools.partial(fn, *args, **kwargs))
            if inspect.isawaitable(result):  # a plain function returning a coroutine
                result = await result
        encoded, value = encode_value(f"the result of step {name!r}", result, max_bytes=self._max_bytes)
        if store is not None:
            written = await store.save_step(
                SaveStepParams(job_id=self._job_id, worker_id=self._worker_id, name=name, value_json=encoded)
            )
            if not written:
                raise JobOwnershipLostError(
                    f"step {name!r} of job {self._job_id} was not stored: worker {self._worker_id} no longer owns "
                    "the row (stale recovery or a shutdown handed it back); stop this run"
                )
        self._done[name] = value
        return value

    async def checkpoint(self, value: Any) -> None:
        """Store `value` as the job's checkpoint; `last_checkpoint` is then `value` (as JSON decodes it)."""
        encoded, decoded = encode_value("the checkpoint", value, max_bytes=self._max_bytes)
        store = self._role()
        if store is not None:
            written = await store.save_checkpoint(
                SaveCheckpointParams(job_id=self._job_id, worker_id=self._worker_id, value_json=encoded)
            )
            if not written:
                raise JobOwnershipLostError(
                    f"the checkpoint of job {self._job_id} was not stored: worker {self._worker_id} no longer owns "
                    "the row (stale recovery or a shutdown handed it back); stop this run"
                )
        self.last_checkpoint = decoded


__all__ = ["MAX_STEP_NAME_CHARS", "JobSteps", "check_step_name", "encode_value"]
