"""App hooks (`before_job`, `after_job`, `on_error`) and middleware, as in soniq 0.1.0.

The hooks are listeners on the app's observation bus: they see the job start
and end events every observer sees. An async hook returns a coroutine, which
is deferred to the job's own task (`soniq.bus.defer` / `run_deferred`), so a
`before_job` hook has finished before the handler starts. A hook that
raises is logged and never fails the job. Middleware wraps the handler call
itself (``async def mw(ctx, call_next)``), the first registered outermost.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from soniq.bus import defer
from soniq.context import JobContext
from soniq.observers import BaseObserver, JobEndEvent, JobStartEvent
from soniq.outcomes import JobOutcome

logger = logging.getLogger("soniq.hooks")

JobHandler = Callable[[JobContext], Awaitable[Any]]
Middleware = Callable[[JobContext, JobHandler], Awaitable[Any]]

_FAILED = frozenset({JobOutcome.RETRY, JobOutcome.TIMEOUT_RETRY, JobOutcome.DEAD_LETTER})


def check_hook(kind: str, fn: Any) -> None:
    if not callable(fn):
        raise TypeError(f"@app.{kind} decorates a function, got {fn!r}")


def check_middleware(fn: Any) -> None:
    if not callable(fn):
        raise TypeError(f"@app.middleware decorates an async function (ctx, call_next), got {fn!r}")
    target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else getattr(fn, "__call__", fn)  # noqa: B004
    if not inspect.iscoroutinefunction(target):
        raise TypeError(
            f"@app.middleware needs an async function `async def mw(ctx, call_next)`, got {fn!r}: "
            "it awaits call_next(ctx) to run the rest of the chain"
        )


def _call(kind: str, fn: Callable[..., Any], *args: Any) -> None:
    try:
        returned = fn(*args)
    except Exception:
        logger.exception("%s hook %r raised; the job is not affected", kind, getattr(fn, "__qualname__", fn))
        return
    if inspect.isawaitable(returned):
        defer(_awaited(kind, fn, returned))


async def _awaited(kind: str, fn: Callable[..., Any], awaitable: Awaitable[Any]) -> None:
    try:
        await awaitable
    except Exception:
        logger.exception("%s hook %r raised; the job is not affected", kind, getattr(fn, "__qualname__", fn))


class _BeforeJobHooks(BaseObserver):
    defers_awaitables = True
    """Tells the bus that these hooks may leave coroutines for the job's task to await."""

    def __init__(self, hooks: Sequence[Callable[..., Any]]) -> None:
        self.hooks = tuple(hooks)

    def on_job_start(self, event: JobStartEvent) -> None:
        job = event.job
        for fn in self.hooks:
            _call("before_job", fn, job.job_name, job.id, event.attempt)


class _JobEndHooks(BaseObserver):
    defers_awaitables = True

    def __init__(self, after: Sequence[Callable[..., Any]], on_error: Sequence[Callable[..., Any]]) -> None:
        self.after = tuple(after)
        self.errors = tuple(on_error)

    def on_job_end(self, event: JobEndEvent) -> None:
        job = event.job
        if event.outcome is JobOutcome.DONE:
            duration_ms = round(event.duration * 1000, 2)
            for fn in self.after:
                _call("after_job", fn, job.job_name, job.id, duration_ms)
        elif event.outcome in _FAILED:
            error = str(event.error) if event.error is not None else (event.error_text or "")
            for fn in self.errors:
                _call("on_error", fn, job.job_name, job.id, error, event.attempt)


def hook_listeners(
    before: Sequence[Callable[..., Any]], after: Sequence[Callable[..., Any]], on_error: Sequence[Callable[..., Any]]
) -> list[BaseObserver]:
    """The app's hooks as bus listeners; none at all when no hook is registered, so a plain app pays nothing."""
    listeners: list[BaseObserver] = []
    if before:
        listeners.append(_BeforeJobHooks(before))
    if after or on_error:
        listeners.append(_JobEndHooks(after, on_error))
    return listeners


def build_chain(middleware: Sequence[Middleware], handler: JobHandler) -> JobHandler:
    """`handler` wrapped in `middleware`, the first one outermost."""
    chain = handler
    for mw in reversed(middleware):
        chain = _wrap(mw, chain)
    return chain


def _wrap(mw: Middleware, call_next: JobHandler) -> JobHandler:
    async def wrapped(ctx: JobContext) -> Any:
        return await mw(ctx, call_next)

    return wrapped
