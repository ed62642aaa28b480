"""The `Soniq` API soniq 0.1.0 had and this one keeps: `CompatApp`, a mixin of `Soniq`.

Hooks and middleware (``@app.before_job``, ``@app.after_job``, ``@app.on_error``,
``@app.middleware``), `schedule`, the lifecycle names (`is_initialized`, `ensure_initialized`,
`is_closed`, `metrics_sink`), and enqueueing the jobs of other services by name (`TaskRef`,
`task_name_pattern`, `route_map`, `enqueue_validation`). The constructor arguments 0.1.0 took
(a backend by name, a metrics sink with 0.1.0's keywords, `retry_policy`) and the decorator
options (`retries`, `validate`) are resolved by the functions below, which `Soniq` calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from soniq.backend_names import url_for_backend_name
from soniq.compat.hooks import check_hook, check_middleware, hook_listeners
from soniq.compat.metrics import adapt_metrics_sink
from soniq.metrics import MetricsSink, NullMetricsSink
from soniq.registry import JobDefinition, default_job_name
from soniq.retry import check_app_retry_policy
from soniq.routing import (
    TaskRef,
    UnknownNameWarnings,
    check_task_name,
    remote_definition,
    routed_queue,
    validate_ref_args,
)
from soniq.validation import JobOptionsError

if TYPE_CHECKING:
    from soniq.backend import QueueStore
    from soniq.observers import Observer
    from soniq.producing import ScheduleAt
    from soniq.registry import JobRegistry
    from soniq.settings import Settings

__all__ = ["CompatApp", "backend_from_argument", "job_budget"]

H = TypeVar("H", bound=Callable[..., Any])


def backend_from_argument(
    backend: QueueStore | str | None, database_url: str | None, settings: dict[str, Any]
) -> QueueStore | None:
    """``Soniq(backend="postgres" | "sqlite" | "memory" | ...)``: a backend by name, its URL put in
    `settings` (from `database_url` or the settings keywords). A ready-made backend is returned as is."""
    if isinstance(backend, str):
        settings["database_url"] = url_for_backend_name(backend, database_url, settings)
        return None
    if database_url is not None:
        settings["database_url"] = database_url
    return backend


def job_budget(
    *, retries: int | None, max_retries: int | None, args_model: type[Any] | None, validate: type[Any] | None
) -> tuple[int, type[Any] | None, str]:
    """``@app.job`` options under their two names: the retry budget, the arguments model and the
    name the model was given under (for error messages). Both names at once is `JobOptionsError`."""
    if retries is not None and max_retries is not None:
        raise JobOptionsError("pass either retries or max_retries (the same option under two names), not both")
    if args_model is not None and validate is not None:
        raise JobOptionsError("pass either args_model or validate (the same option under two names), not both")
    budget = retries if retries is not None else (max_retries if max_retries is not None else 3)
    if validate is not None:
        return budget, validate, "validate"
    return budget, args_model, "args_model"


class CompatApp:
    """soniq 0.1.0's app API; a mixin of `Soniq`."""

    if TYPE_CHECKING:
        settings: Settings
        registry: JobRegistry
        metrics: MetricsSink
        observers: list[Observer]
        _connected: bool
        _closed: bool

        async def connect(self) -> None: ...

        async def enqueue(self, fn_or_name: Callable[..., Any] | str | TaskRef, /, **options: Any) -> str: ...

    def _init_compat(self, *, retry_policy: Any, metrics_sink: MetricsSink | None) -> None:
        """Part of `Soniq.__init__`: the retry policy, empty hooks, and a 0.1.0 metrics sink on the bus."""
        check_app_retry_policy(retry_policy)
        self.retry_policy: Any = retry_policy
        """``Soniq(retry_policy=obj)``: `obj.delay_for(*, attempt, job_meta, exc)` gives each retry's delay."""
        self.hooks: dict[str, list[Callable[..., Any]]] = {"before_job": [], "after_job": [], "on_error": []}
        self.middleware_chain: list[Callable[..., Any]] = []
        """`@app.middleware` functions in registration order (the first wraps all the others)."""
        self._hook_listeners: tuple[Observer, ...] = ()
        bridged = adapt_metrics_sink(metrics_sink)
        if bridged is not None:
            # A sink with async methods or 0.1.0's keywords listens on the bus as an observer.
            self.metrics = NullMetricsSink()
            self.observers.append(bridged)  # type: ignore[arg-type]  # duck-typed: job start/end hooks only

    # -- hooks and middleware ------------------------------------------------------

    def before_job(self, fn: H) -> H:
        """``fn(job_name, job_id, attempt)`` before each run's handler (sync or async; a failure is logged)."""
        return self._add_hook("before_job", fn)

    def after_job(self, fn: H) -> H:
        """``fn(job_name, job_id, duration_ms)`` after each run that succeeded."""
        return self._add_hook("after_job", fn)

    def on_error(self, fn: H) -> H:
        """``fn(job_name, job_id, error, attempt)`` after each run that failed (retried or dead-lettered)."""
        return self._add_hook("on_error", fn)

    def _add_hook(self, kind: str, fn: H) -> H:
        check_hook(kind, fn)
        self.hooks[kind].append(fn)
        self._hook_listeners = tuple(
            hook_listeners(self.hooks["before_job"], self.hooks["after_job"], self.hooks["on_error"])
        )
        return fn

    def middleware(self, fn: H) -> H:
        """``async def mw(ctx, call_next)`` around every handler call; the first registered is outermost.
        It returns (or changes) what ``await call_next(ctx)`` returns, and may catch what it raises."""
        check_middleware(fn)
        self.middleware_chain.append(fn)
        return fn

    # -- scheduling and lifecycle names --------------------------------------------

    async def schedule(self, fn_or_name: Callable[..., Any] | str, run_at: ScheduleAt, /, **options: Any) -> str:
        """`enqueue` with ``scheduled_at=run_at`` (a datetime, a timedelta or seconds from now)."""
        if run_at is None:
            raise JobOptionsError("schedule() needs run_at: a datetime, a timedelta or a number of seconds from now")
        if "scheduled_at" in options:
            raise TypeError("schedule() takes the time as run_at; do not pass scheduled_at as well")
        return await self.enqueue(fn_or_name, scheduled_at=run_at, **options)

    @property
    def is_initialized(self) -> bool:
        """0.1.0's name: the app is connected to its backend."""
        return self._connected

    async def ensure_initialized(self) -> None:
        """0.1.0's name for `connect()` (idempotent; the schema is created by `setup()`)."""
        await self.connect()

    @property
    def is_closed(self) -> bool:
        """0.1.0's name: False until `close()`, True after it (until a later `connect()` opens the app again)."""
        return self._closed

    @property
    def metrics_sink(self) -> MetricsSink:
        """0.1.0's name for `metrics`."""
        return self.metrics

    # -- jobs of other services, by name -----------------------------------------------

    def _name_and_queue(self, fn: Callable[..., Any], name: str | None, queue: str) -> str:
        """Check the job's name against `task_name_pattern`; its queue after `route_map`."""
        job_name = name if name is not None else default_job_name(fn)
        if self.settings.task_name_pattern is not None:
            check_task_name(job_name, self.settings.task_name_pattern)
        return routed_queue(self.settings, job_name, queue)

    def _definition_for_name(self, target: str | TaskRef) -> JobDefinition:
        name = target.name if isinstance(target, TaskRef) else target
        check_task_name(name, self.settings.task_name_pattern)
        default_queue = target.default_queue if isinstance(target, TaskRef) else None
        definition = self.registry.get(name)
        if definition is not None:
            return dataclasses.replace(definition, queue=default_queue) if default_queue else definition
        mode = self.settings.enqueue_validation
        if not isinstance(target, TaskRef):
            if mode == "strict":
                return self.registry.require(name)  # raises, listing the registered names
            if mode == "warn":
                self._unknown_names.warn(name)
        version = target.version if isinstance(target, TaskRef) else 1
        return remote_definition(self.settings, name, default_queue, version)

    @property
    def _unknown_names(self) -> UnknownNameWarnings:
        warnings: UnknownNameWarnings | None = getattr(self, "_unknown_name_warnings", None)
        if warnings is None:
            warnings = self._unknown_name_warnings = UnknownNameWarnings()
        return warnings

    @staticmethod
    def _ref_args(target: object, kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
        if isinstance(target, TaskRef) and isinstance(kwargs, Mapping):
            return validate_ref_args(target, dict(kwargs))
        return kwargs
