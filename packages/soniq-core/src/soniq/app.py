"""The `Soniq` app: settings, the job registry, the backend, and the producer API."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, overload

from soniq import features
from soniq.backend import CancelChannel, DeadLetterStore, QueueStore, check_backend, has_role
from soniq.backend_names import pool_options, url_for_backend_name  # compat-surface
from soniq.bus import ObservationBus
from soniq.dead_letter import DeadLetterService
from soniq.dedup import resolve_dedup_key
from soniq.dependencies import DependsOn, JobCall, check_batch, check_policy, normalize_depends_on
from soniq.discovery import create_backend, load_observer_factories
from soniq.errors import JobNotFoundError, SoniqError, UnknownJobError
from soniq.hooks import check_hook, check_middleware, hook_listeners
from soniq.log_escape import escape_line
from soniq.metrics import MetricsSink, NullMetricsSink, adapt_metrics_sink
from soniq.observers import EnqueueEvent, Observer
from soniq.params import (
    CancelJobParams,
    DeleteJobParams,
    EnqueueJobsParams,
    GetDeadLetterParams,
    GetJobParams,
    GroupLimit,
    ListJobsParams,
    QueueStatsParams,
    RequestCancelParams,
    SetupSchemaParams,  # issue 13
)
from soniq.records import (
    CancelOutcome,
    DeadLetterRecord,
    DependencyPolicy,
    JobRecord,
    JobStatus,
    NewJob,
    RecoveryResult,
    SchemaReport,  # issue 13
    SchemaStatus,
)
from soniq.redaction import redact_url
from soniq.registry import JobDefinition, JobRegistry, default_job_name
from soniq.retry import check_app_retry_policy
from soniq.routing import (  # compat-surface
    TaskRef,
    UnknownNameWarnings,
    check_task_name,
    remote_definition,
    resolve_producer_id,
    routed_queue,
    validate_ref_args,
)
from soniq.serialization import new_job_ids
from soniq.settings import Settings
from soniq.sync_bridge import SyncBridge
from soniq.validation import (
    JobOptionsError,
    check_page,
    check_priority,
    check_queue_filter,
    check_queue_name,
    encode_args,
    lookup_id,
)
from soniq.validation import resolve_scheduled_at as resolve_scheduled_at
from soniq.waiting import JobWaiter, check_timeout
from soniq.worker_event import run_until_event  # compat-surface

if TYPE_CHECKING:
    from soniq.scheduling.service import Scheduler
    from soniq.worker.summary import WorkerSummary
    from soniq.worker.worker import Worker

logger = logging.getLogger("soniq")

F = TypeVar("F", bound=Callable[..., Any])
H = TypeVar("H", bound=Callable[..., Any])

ScheduleAt = datetime | timedelta | int | float | None


class Soniq:
    """One application's queue: ``app = Soniq("postgresql://...")``.

    `extra_observers` adds observer objects to those loaded from the
    ``soniq.observers`` entry points (the `observers` setting names which).

    Settings come from keywords, then `SONIQ_*` environment variables, then
    defaults, and are validated here. The backend is chosen by the URL's
    scheme through the ``soniq.backends`` entry points (or passed ready-made
    with ``backend=``) the first time it is needed, so a jobs module's bare
    ``Soniq()`` works on an install without the default backend as long as
    ``--database-url`` (`use_database_url`) points it elsewhere first.
    """

    _instances: ClassVar[weakref.WeakSet[Soniq]] = weakref.WeakSet()

    def __init__(
        self,
        database_url: str | None = None,
        *,
        backend: QueueStore | str | None = None,
        metrics_sink: MetricsSink | None = None,
        extra_observers: Iterable[Observer] | None = None,
        backend_options: Mapping[str, Any] | None = None,
        retry_policy: Any = None,
        **settings: Any,
    ) -> None:
        if isinstance(backend, str):  # compat-surface: a backend by name, its URL from the settings
            settings["database_url"] = url_for_backend_name(backend, database_url, settings)
            backend = None
        elif database_url is not None:
            settings["database_url"] = database_url
        self.settings = Settings.load(settings)
        self.backend_options: dict[str, Any] = pool_options(self.settings, backend_options)
        if backend is not None:
            check_backend(backend)
        self._backend: QueueStore | None = backend
        self._backend_from_url = backend is None
        self.registry = JobRegistry()
        self.metrics: MetricsSink = metrics_sink or NullMetricsSink()
        # `observers` (SONIQ_OBSERVERS) is the setting naming entry points to load; objects come in here.
        self.observers: list[Observer] = list(extra_observers or [])
        for _name, factory in load_observer_factories(self.settings.observers):
            self.observers.append(factory(self.settings))
        self.dead_letter = DeadLetterService(self)
        self._connected = False
        self._closed = False  # 0.1.0's `is_closed`: `close()` sets it, the next `connect()` clears it
        # One lock per event loop: a lock made on the first loop cannot be awaited on another.
        self._connect_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._sync = SyncBridge(self)
        self._sync_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._bus: ObservationBus | None = None
        self._bus_key: tuple[tuple[Observer, ...], MetricsSink] | None = None
        self._scheduler: Scheduler | None = None  # issue 14: periodic jobs
        # issue 19: one `wait_for` service per event loop (see soniq.waiting)
        self._waiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, JobWaiter] = weakref.WeakKeyDictionary()
        # -- compat-jobs (issue 12): retry policy, hooks, middleware, 0.1.0-style metrics sinks --
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
        # -- end compat-jobs --
        Soniq._instances.add(self)

    def __repr__(self) -> str:
        return f"<Soniq {redact_url(self.settings.resolved_database_url)!r} jobs={len(self.registry)}>"

    # -- registry ----------------------------------------------------------

    @overload
    def job(self, func: F, /) -> F: ...

    @overload
    def job(
        self,
        func: None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_retries: int | None = None,
        priority: int = 100,
        timeout: float | None = None,
        retries: int | None = None,
        retry_delay: float | Sequence[float] | None = None,
        retry_backoff: bool | None = None,
        retry_max_delay: float | None = None,
        retry_jitter: bool | None = None,
        unique: bool | None = None,
        args_model: type[Any] | None = None,
        validate: type[Any] | None = None,
        max_concurrent: int | None = None,
        rate_limit: str | tuple[int, float] | None = None,
        limit_key: str | Callable[[Mapping[str, Any]], Any] | None = None,
    ) -> Callable[[F], F]: ...

    def job(
        self,
        func: F | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_retries: int | None = None,
        priority: int = 100,
        timeout: float | None = None,
        retries: int | None = None,
        retry_delay: float | Sequence[float] | None = None,
        retry_backoff: bool | None = None,
        retry_max_delay: float | None = None,
        retry_jitter: bool | None = None,
        unique: bool | None = None,
        args_model: type[Any] | None = None,
        validate: type[Any] | None = None,
        max_concurrent: int | None = None,
        rate_limit: str | tuple[int, float] | None = None,
        limit_key: str | Callable[[Mapping[str, Any]], Any] | None = None,
    ) -> F | Callable[[F], F]:
        """Register an ``async def`` (runs on the loop) or plain ``def`` (runs in the sync pool).

        `retries` is another name for `max_retries` (0.1.0's); `validate` for `args_model`. The
        function gains ``fn.enqueue(**kwargs)``, ``fn.options(queue=..., ...).enqueue(**kwargs)``
        and ``fn.call(**kwargs)`` (a `JobCall`, for `chain`).

        Fleet-wide limits (enforced by the store across every worker): `max_concurrent` rows of
        this job `processing` at once, `rate_limit` starts per period (``"10/s"``, ``"100/m"``,
        ``"1000/h"``, ``"10/5s"`` or ``(count, seconds)``); with `limit_key` (an argument name,
        or a callable taking the arguments mapping) each key value is limited on its own. A bad
        limit raises `InvalidLimitError` here, and nothing is registered.
        """
        # -- compat-jobs (issue 12): 0.1.0's decorator options --
        if retries is not None and max_retries is not None:
            raise JobOptionsError("pass either retries or max_retries (the same option under two names), not both")
        if args_model is not None and validate is not None:
            raise JobOptionsError("pass either args_model or validate (the same option under two names), not both")
        budget = retries if retries is not None else (max_retries if max_retries is not None else 3)
        extra: dict[str, Any] = {
            "retry_delay": retry_delay,
            "retry_backoff": retry_backoff,
            "retry_max_delay": retry_max_delay,
            "retry_jitter": retry_jitter,
            "unique": unique,
            "args_model": args_model if args_model is not None else validate,
            "args_model_option": "validate" if validate is not None else "args_model",
            "max_concurrent": max_concurrent,  # issue 19
            "rate_limit": rate_limit,
            "limit_key": limit_key,
        }
        # -- end compat-jobs --

        def register(fn: F) -> F:
            job_queue = self._name_and_queue(fn, name, queue)  # compat-surface
            check_queue_name(job_queue, what="job queue")
            check_priority(priority)
            self.registry.add(
                fn, name=name, queue=job_queue, max_retries=budget, priority=priority, timeout=timeout, extra=extra
            )
            add_enqueue_helpers(self, fn)
            return fn

        if func is not None:
            return register(func)
        return register

    # -- periodic jobs (issue 14): the rest lives in soniq.scheduling ----------

    @property
    def scheduler(self) -> Scheduler:
        """The schedules in the store: ``await app.scheduler.add(job, every=60)``, `pause`, `list`..."""
        if self._scheduler is None:
            from soniq.scheduling.service import Scheduler

            self._scheduler = Scheduler(self)
        return self._scheduler

    def periodic(
        self,
        *,
        cron: Any = None,
        every: Any = None,
        timezone: str = "UTC",
        catch_up: str = "skip",
        catch_up_limit: int = 1,
        schedule_args: Mapping[str, Any] | None = None,
        schedule_name: str | None = None,
        **job_options: Any,
    ) -> Callable[[F], F]:
        """Register a job (`job_options` as for `job`) and a schedule for it, stored when a worker starts.

        Bad `cron`, `every`, `timezone` or `catch_up` raise `ScheduleError` here, at decoration.
        """
        from soniq.scheduling.catchup import check_catch_up
        from soniq.scheduling.service import PeriodicSpec
        from soniq.scheduling.timing import Timing

        timing = Timing.parse(cron=cron, every=every, timezone=timezone)
        policy, limit = check_catch_up(catch_up, catch_up_limit)

        def register(fn: F) -> F:
            self.job(**job_options)(fn)
            definition = self.registry.find_by_function(fn)
            assert definition is not None
            self.scheduler.declare(
                PeriodicSpec(
                    name=schedule_name or definition.name,
                    job_name=definition.name,
                    timing=timing,
                    args=dict(schedule_args or {}),
                    catch_up=policy,
                    catch_up_limit=limit,
                )
            )
            return fn

        return register

    # -- end periodic jobs ---------------------------------------------------------

    # -- issue 19: fleet-wide limits ------------------------------------------------

    def group_limits(self) -> tuple[GroupLimit, ...]:
        """Every limit this app knows: the `queue_limits` setting's (in queue order), then each
        registered job's own (in job-name order). A worker passes them to every claim
        (`ClaimJobsParams.limits`); empty means the claim counts nothing. Rebuilt only when a
        job is registered or the settings change."""
        cached: tuple[int, Settings, tuple[GroupLimit, ...]] | None = getattr(self, "_group_limits", None)
        if cached is not None and cached[0] == self.registry.changes and cached[1] is self.settings:
            return cached[2]
        jobs = tuple(d.limits.group_limit(d.name) for d in self.registry.definitions() if d.limits is not None)
        limits = self.settings.queue_limits + jobs
        self._group_limits = (self.registry.changes, self.settings, limits)
        return limits

    def use_database_url(self, url: str, **backend_options: Any) -> None:
        """Point an app that has not connected yet at another URL (``soniq worker --database-url``).

        The app's own `backend_options` (its namespace above all) carry over, and keywords here
        win; an option the new URL's backend does not accept is refused, never dropped, since a
        worker on the wrong namespace would dead-letter another tenant's jobs.
        """
        if self._connected:
            raise SoniqError("use_database_url() must be called before the app connects")
        settings = self.settings.with_overrides(database_url=url)
        options = {**self.backend_options, **backend_options}
        try:
            backend = create_backend(settings.resolved_database_url, **options)
        except TypeError as exc:
            raise SoniqError(
                f"cannot point this app at {redact_url(settings.resolved_database_url)!r}: its backend options "
                f"({', '.join(sorted(options))}) do not apply there ({exc}); construct the app with options "
                "that backend accepts"
            ) from None
        check_backend(backend)
        self.settings = settings
        self.backend_options = options
        self._backend = backend
        self._backend_from_url = True

    def add_observer(self, observer: Observer) -> None:
        self.observers.append(observer)

    @property
    def bus(self) -> ObservationBus:
        """The observers and the metrics sink as one bus, rebuilt only when either changed."""
        key = (tuple(self.observers) + self._hook_listeners, self.metrics)
        if self._bus is None or self._bus_key != key:
            self._bus = ObservationBus(key[0], self.metrics)
            self._bus_key = key
        return self._bus

    # -- lifecycle -----------------------------------------------------------

    @property
    def backend(self) -> QueueStore:
        """The backend, built from the URL's scheme the first time anything needs it."""
        if self._backend is None:
            backend = create_backend(self.settings.resolved_database_url, **self.backend_options)
            check_backend(backend)
            self._backend = backend
        return self._backend

    def new_backend_instance(self) -> QueueStore | None:
        """Another, unconnected backend on the same URL and options, for another event loop's thread.

        None when the app was given a ready-made backend, or when a second instance would be a
        different queue (``memory://`` without a name).
        """
        if not self._backend_from_url:
            return None
        url = self.settings.resolved_database_url
        if url.split("://", 1)[0].split("+", 1)[0].lower() == "memory" and url.rstrip("/").lower() in (
            "memory:",
            "memory:/",
            "memory://",
        ):
            return None
        backend: QueueStore = create_backend(url, **self.backend_options)
        check_backend(backend)
        return backend

    @property
    def sync_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._sync_pool is None:
            self._sync_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.settings.sync_handler_pool_size, thread_name_prefix="soniq-sync"
            )
        return self._sync_pool

    async def connect(self) -> None:
        if self._connected:
            return
        loop = asyncio.get_running_loop()
        lock = self._connect_locks.get(loop)
        if lock is None:
            lock = self._connect_locks[loop] = asyncio.Lock()
        async with lock:
            if not self._connected:
                await self.backend.connect()
                self._connected = True
                self._closed = False

    async def connected_backend(self) -> QueueStore:
        """The backend for the running loop: the app's own, or the sync bridge's on its thread."""
        bridged = self._sync.backend_for_running_loop()
        if bridged is not None:
            return await bridged
        await self.connect()
        return self.backend

    async def setup(self) -> None:
        """Create or upgrade the schema (a soniq 0.1.0 one included); idempotent."""
        # Before connect: a backend's first use refuses a schema that only `setup` may upgrade.
        await self.backend.setup()
        await self.connect()

    # -- issue 13: schema families and upgrades ------------------------------

    async def setup_schema(self, *, dry_run: bool = False, force: bool = False) -> SchemaReport:
        """`setup`, reporting the schema family found and the SQL run (or, with `dry_run`, to run).

        `force` upgrades a soniq 0.1.0 database even while 0.1.0 workers heartbeat into it. A backend
        without the `SchemaAdmin` role raises `MissingBackendRoleError` (`setup()` still works there).
        """
        admin = features.schema_admin(self.backend)
        report = await admin.setup_schema(SetupSchemaParams(dry_run=dry_run, force=force))
        if not dry_run:
            await self.connect()
        return report

    async def close(self) -> None:
        """Close the backend, and stop the `enqueue_sync` thread if one was started.

        `wait_for` calls still waiting on this loop raise `SoniqError` (the app was closed), and a
        scheduler loop `app.scheduler.start()` began is stopped first."""
        if self._scheduler is not None:
            await self._scheduler.stop()
        try:
            waiter = self._waiters.pop(asyncio.get_running_loop(), None)
        except RuntimeError:
            waiter = None
        if waiter is not None:
            await waiter.close()
        self._sync.close()
        if self._connected and self._backend is not None:
            self._connected = False
            await self._backend.close()
        if self._sync_pool is not None:
            self._sync_pool.shutdown(wait=False)
            self._sync_pool = None
        self._closed = True

    async def __aenter__(self) -> Soniq:
        await self.connect()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- producers -------------------------------------------------------------

    def _definition(self, fn_or_name: Callable[..., Any] | str | TaskRef) -> JobDefinition:
        if isinstance(fn_or_name, (str, TaskRef)):
            return self._definition_for_name(fn_or_name)  # compat-surface
        definition = self.registry.find_by_function(fn_or_name)
        if definition is None:
            raise UnknownJobError(
                f"{default_job_name(fn_or_name)} is not registered on this app; decorate it with @app.job"
            )
        return definition

    def _new_jobs(
        self,
        definition: JobDefinition,
        kwargs_list: Sequence[Mapping[str, Any]],
        *,
        queue: str | None,
        priority: int | None,
        scheduled_at: ScheduleAt,
        unique: bool | None = None,
        dedup_key: str | None = None,
        producer_id: str | None = None,
        depends_on: tuple[str, ...] = (),
        dependency_policy: DependencyPolicy = DependencyPolicy.CANCEL,
    ) -> list[NewJob]:
        """Validate and build rows; everything shared by the batch is worked out once.

        A job without dependencies and without a `limit_key` is built exactly as before issue 19."""
        if producer_id is None:  # compat-surface: every row says which producer wrote it
            producer_id = resolve_producer_id(self.settings.producer_id)
        if queue is not None:
            check_queue_name(queue)
        if priority is not None:
            check_priority(priority)
        when = resolve_scheduled_at(scheduled_at)
        name = definition.name
        target_queue = queue or definition.queue
        target_priority = definition.priority if priority is None else priority
        # `unique` on the call wins; otherwise the job's own default (the decorator's `unique=`).
        wants_unique = bool(getattr(definition, "unique", False)) if unique is None else unique
        limit = self.settings.max_args_bytes
        ids = new_job_ids(len(kwargs_list))
        limits = definition.limits
        keyed = limits if limits is not None and limits.limit_key is not None else None
        plain = keyed is None and not depends_on
        jobs = []
        for index, kwargs in enumerate(kwargs_list):
            if not isinstance(kwargs, Mapping):
                raise TypeError(f"enqueue_many item {index} must be a dict of keyword arguments, got {kwargs!r}")
            checked, encoded = encode_args(name, kwargs, max_bytes=limit)
            definition.bind_arguments(kwargs)  # compat-jobs: a wrong name fails here, before anything is stored
            job = NewJob(
                id=ids[index],
                job_name=name,
                args=checked,
                args_json=encoded,
                queue=target_queue,
                priority=target_priority,
                scheduled_at=when,
                max_attempts=definition.max_attempts,
                dedup_key=resolve_dedup_key(name, checked, unique=wants_unique, dedup_key=dedup_key),
                producer_id=producer_id,
            )
            if not plain:  # issue 19: only jobs with dependencies or a partitioned limit pay for this
                job = dataclasses.replace(
                    job,
                    depends_on=depends_on,
                    dependency_policy=dependency_policy,
                    limit_key=keyed.key_for(name, checked) if keyed is not None else None,
                )
            jobs.append(job)
        return jobs

    def _announce(self, jobs: list[NewJob]) -> list[NewJob]:
        """Tell observers about jobs that passed validation; their headers go into `trace_context`.

        First, a job that needs an optional backend role the backend does not fill is refused with
        `MissingBackendRoleError` (`depends_on`: DependencyStore; a `limit_key`: LimitStore), before
        any observer hears of it and before anything is stored."""
        self._check_job_roles(jobs)
        bus = self.bus
        if not bus.wants("on_enqueue"):
            return jobs
        announced = []
        for job in jobs:
            trace = bus.enqueue(EnqueueEvent(job_id=job.id, job_name=job.job_name, queue=job.queue))
            announced.append(dataclasses.replace(job, trace_context=trace or None))
        return announced

    def _check_job_roles(self, jobs: Sequence[NewJob]) -> None:
        """Refuse jobs whose fields a backend without the role would silently drop (see `_announce`)."""
        if any(job.depends_on for job in jobs):
            features.require_dependencies(self.backend)
        if any(job.limit_key is not None for job in jobs):
            features.require_limits(self.backend)

    def _check_connection(self, connection: Any) -> None:
        if connection is not None and not self.backend.capabilities.transactional_enqueue:
            raise SoniqError(
                f"{type(self.backend).__name__} does not support transactional enqueue (connection=...); "
                "use a backend whose capabilities include transactional_enqueue, such as soniq-postgres"
            )

    async def enqueue(
        self,
        fn_or_name: Callable[..., Any] | str | TaskRef,
        /,
        *,
        queue: str | None = None,
        priority: int | None = None,
        scheduled_at: ScheduleAt = None,
        connection: Any = None,
        args: Mapping[str, Any] | None = None,
        unique: bool | None = None,
        dedup_key: str | None = None,
        depends_on: DependsOn = None,
        dependency_policy: DependencyPolicy | str = DependencyPolicy.CANCEL,
        **kwargs: Any,
    ) -> str:
        """Queue one run of a registered job with keyword arguments; returns its id.

        `args=` passes the arguments as a mapping (for names such as ``queue``).
        With `connection=`, the insert joins that open transaction. With
        `unique=True` (key: job name plus arguments) or `dedup_key=`, a job
        whose key a queued job already holds is not stored again: the queued
        job's id is returned instead.

        `depends_on` (an id or a list of ids) makes the job wait until every one of those jobs
        is `done`; when one is cancelled or dead-lettered, `dependency_policy` ``"cancel"`` (the
        default) cancels this job too and ``"run"`` runs it anyway. An id no job has is
        `UnknownDependencyError`, and nothing is stored.
        """
        if args is not None and kwargs:
            raise TypeError("pass job arguments either as keywords or as args={...}, not both")
        definition = self._definition(fn_or_name)
        self._check_connection(connection)
        deps = normalize_depends_on(depends_on)
        (job,) = self._new_jobs(
            definition,
            [self._ref_args(fn_or_name, args if args is not None else kwargs)],
            queue=queue,
            priority=priority,
            scheduled_at=scheduled_at,
            unique=unique,
            dedup_key=dedup_key,
            depends_on=deps,
            dependency_policy=check_policy(dependency_policy),
        )
        if deps:
            check_batch([job])
        (stored,) = await self._insert(self._announce([job]), connection)
        return stored

    async def enqueue_many(
        self,
        fn_or_name: Callable[..., Any] | str | TaskRef,
        kwargs_list: Sequence[Mapping[str, Any]],
        /,
        *,
        queue: str | None = None,
        priority: int | None = None,
        scheduled_at: ScheduleAt = None,
        connection: Any = None,
        unique: bool | None = None,
        depends_on: DependsOn = None,
        dependency_policy: DependencyPolicy | str = DependencyPolicy.CANCEL,
    ) -> list[str]:
        """Queue many runs of one job in one insert (all or none); returns their ids in order.

        With `unique=True`, items whose arguments repeat an earlier item (or a queued job) get
        that job's id; their positions in the returned list say so. `depends_on` and
        `dependency_policy` (see `enqueue`) apply to every item.
        """
        definition = self._definition(fn_or_name)
        self._check_connection(connection)
        deps = normalize_depends_on(depends_on)
        policy = check_policy(dependency_policy)
        kwargs_list = [self._ref_args(fn_or_name, kwargs) for kwargs in kwargs_list]
        jobs = self._new_jobs(
            definition,
            kwargs_list,
            queue=queue,
            priority=priority,
            scheduled_at=scheduled_at,
            unique=unique,
            depends_on=deps,
            dependency_policy=policy,
        )
        if not jobs:
            return []
        if deps:
            check_batch(jobs)
        return await self._insert(self._announce(jobs), connection)

    async def chain(self, *calls: JobCall, connection: Any = None) -> list[str]:
        """Enqueue the calls so that each waits for the one before it (policy ``cancel``: when one
        fails for good, every later one is cancelled), in one insert: all or none. Returns the
        ids in order. Make the calls with ``fn.call(**kwargs)`` or `JobCall`; a chain never
        deduplicates (each step is a new row)."""
        if not calls:
            raise JobOptionsError("chain() needs at least one call, e.g. app.chain(fetch.call(url=u), parse.call())")
        self._check_connection(connection)
        jobs: list[NewJob] = []
        for position, call in enumerate(calls):
            if not isinstance(call, JobCall):
                raise TypeError(
                    f"chain() takes JobCall values (fn.call(**kwargs)); item {position} is {type(call).__name__}"
                )
            (job,) = self._new_jobs(
                self._definition(call.job),
                [self._ref_args(call.job, call.args)],
                queue=call.queue,
                priority=call.priority,
                scheduled_at=call.scheduled_at,
                unique=False,
                depends_on=(jobs[-1].id,) if jobs else (),
            )
            jobs.append(job)
        check_batch(jobs)
        return await self._insert(self._announce(jobs), connection)

    def enqueue_sync(
        self,
        fn_or_name: Callable[..., Any] | str | TaskRef,
        /,
        *,
        queue: str | None = None,
        priority: int | None = None,
        scheduled_at: ScheduleAt = None,
        args: Mapping[str, Any] | None = None,
        unique: bool | None = None,
        dedup_key: str | None = None,
        depends_on: DependsOn = None,
        dependency_policy: DependencyPolicy | str = DependencyPolicy.CANCEL,
        **kwargs: Any,
    ) -> str:
        """`enqueue` for synchronous code, from any thread that is not running an event loop.

        Runs on a private loop thread of this app (started on first use, stopped by `close()` or
        at exit). Transactional enqueue needs the caller's loop, so `connection=` is async only.
        """
        coroutine = self.enqueue(
            fn_or_name,
            queue=queue,
            priority=priority,
            scheduled_at=scheduled_at,
            args=args,
            unique=unique,
            dedup_key=dedup_key,
            depends_on=depends_on,
            dependency_policy=dependency_policy,
            **kwargs,
        )
        return self._sync.run(coroutine, what="enqueue")

    def enqueue_many_sync(
        self,
        fn_or_name: Callable[..., Any] | str | TaskRef,
        kwargs_list: Sequence[Mapping[str, Any]],
        /,
        *,
        queue: str | None = None,
        priority: int | None = None,
        scheduled_at: ScheduleAt = None,
        depends_on: DependsOn = None,
        dependency_policy: DependencyPolicy | str = DependencyPolicy.CANCEL,
    ) -> list[str]:
        """`enqueue_many` for synchronous code; see `enqueue_sync`."""
        coroutine = self.enqueue_many(
            fn_or_name,
            kwargs_list,
            queue=queue,
            priority=priority,
            scheduled_at=scheduled_at,
            depends_on=depends_on,
            dependency_policy=dependency_policy,
        )
        return self._sync.run(coroutine, what="enqueue_many")

    def get_job_sync(self, job_id: str) -> dict[str, Any] | None:
        """`get_job` for synchronous code; see `enqueue_sync`."""
        return self._sync.run(self.get_job(job_id), what="get_job")

    def wait_for_sync(self, job_id: str, timeout: float | None = None) -> Any:
        """`wait_for` for synchronous code; see `enqueue_sync`. Blocks the calling thread."""
        return self._sync.run(self.wait_for(job_id, timeout), what="wait_for")

    def close_sync(self) -> None:
        """Stop the `enqueue_sync` thread and close its backend (what `close()` does for that part)."""
        self._sync.close()

    async def _insert(self, jobs: list[NewJob], connection: Any) -> list[str]:
        """Store the jobs; returns the stored id of each, in order (see `collapse_duplicates`)."""
        backend = await self.connected_backend()
        bus = self.bus
        unique_jobs, positions = collapse_duplicates(jobs)
        error: BaseException | None = None
        stored: list[str] | None = None
        try:
            stored = await backend.enqueue_jobs(EnqueueJobsParams(jobs=unique_jobs, connection=connection))
        except BaseException as exc:
            error = exc
            raise
        finally:
            # A job the store deduplicated is reported under the id it was given: the existing one.
            reported = [job.id for job in unique_jobs] if stored is None else list(stored)
            for job, job_id in zip(unique_jobs, reported, strict=False) if bus.wants("on_enqueue_end") else ():
                bus.enqueue_end(EnqueueEvent(job_id=job_id, job_name=job.job_name, queue=job.queue), error)
        ids = [job.id for job in unique_jobs] if stored is None else list(stored)
        return [ids[position] for position in positions]

    # -- producers of other services' jobs (compat-surface) ----------------------

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
        return remote_definition(self.settings, name, default_queue)

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

    async def schema_status(self) -> SchemaStatus:
        """The schema steps applied to the store and those `setup()` would apply; changes nothing.

        Asked of the backend before `connect()` (which may upgrade the schema by itself), and the
        connections it opened for that are closed again unless the app was already connected. A backend
        without the `SchemaAdmin` role raises `MissingBackendRoleError`.
        """
        backend = self.backend
        admin = features.schema_admin(backend)
        try:
            return await admin.schema_status()
        finally:
            if not self._connected:
                await backend.close()

    # 0.1.0's lifecycle names.

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

    # -- end of compat-surface producers --

    # -- reading and managing jobs ------------------------------------------

    async def get_job(self, job_id: str) -> dict[str, Any] | None:
        """The job as a dict (with its result), or None; see `job_dict` for the keys.

        A dead-lettered job comes back as its dead-letter row with ``status="dead_letter"``
        (see `dead_letter_job_dict`). An id no store can hold (NUL, a lone surrogate, over
        `soniq.validation.MAX_ID_LENGTH` characters) is None without asking the store.

        On a backend without the `DeadLetterStore` role the dead-letter rows cannot be read, so a
        dead-lettered job is None, as a deleted or never-enqueued one is: None then means "not in
        the jobs table", never "still to run" nor "succeeded"."""
        key = lookup_id(job_id)
        if key is None:
            return None
        backend = await self.connected_backend()
        row = await backend.get_job(GetJobParams(job_id=key))
        if row is not None:
            return job_dict(row)
        if not has_role(backend, DeadLetterStore):
            return None
        dead = await features.dead_letter_store(backend).get_dead_letter(GetDeadLetterParams(job_id=key))
        return dead_letter_job_dict(dead) if dead is not None else None

    # -- issue 12 (compat-store): results and deleting jobs --------------------

    async def get_result(self, job_id: str, result_model: Any = None) -> Any:
        """The stored result of a `done` job, None for a job that is not done (or not found).

        With `result_model` (a pydantic model, or any class taking the result), the result is
        validated into it: ``model_validate`` when the class has one, else ``result_model(**result)``
        for a dict and ``result_model(result)`` otherwise. A row deleted by ``result_ttl`` is not found.
        """
        key = lookup_id(job_id)
        if key is None:
            return None
        backend = await self.connected_backend()
        row = await backend.get_job(GetJobParams(job_id=key))
        if row is None or row.status is not JobStatus.DONE or row.result is None:
            return None
        if result_model is None:
            return row.result
        validate = getattr(result_model, "model_validate", None)
        if callable(validate):
            return validate(row.result)
        if isinstance(row.result, Mapping):
            return result_model(**row.result)
        return result_model(row.result)

    async def delete_job(self, job_id: str) -> bool:
        """Delete a job's row whatever its status; False when there was none.

        A job that is running keeps running, but its outcome is then written nowhere.
        Dead-letter rows are deleted with ``app.dead_letter.purge``."""
        key = lookup_id(job_id)
        if key is None:
            return False
        backend = await self.connected_backend()
        return await backend.delete_job(DeleteJobParams(job_id=key))

    # -- end issue 12 (compat-store) ---------------------------------------------

    async def list_jobs(
        self,
        queue: str | None = None,
        status: str | JobStatus | None = None,
        limit: int = 100,
        offset: int = 0,
        *,
        include_results: bool = False,
    ) -> list[dict[str, Any]]:
        """A page of jobs; `result` is None unless `include_results` (results may be large).

        `limit` is 1 to `soniq.validation.MAX_PAGE_LIMIT` (10,000), `offset` 0 to `MAX_OFFSET`; a
        `queue` enqueue would refuse (`check_queue_name`: NUL, a lone surrogate...) is `JobOptionsError`.
        A backend without the `OperatorReads` role raises `MissingBackendRoleError`."""
        features.operator_reads(self.backend, features.LISTING_JOBS)
        check_queue_filter(queue)
        wanted: JobStatus | None = None
        if status is not None:
            try:
                wanted = JobStatus(status)
            except ValueError:
                raise JobOptionsError(
                    f"status must be one of {', '.join(s.value for s in JobStatus)}, got {status!r}"
                ) from None
        check_page(limit, offset)
        backend = features.operator_reads(await self.connected_backend(), features.LISTING_JOBS)
        rows = await backend.list_jobs(
            ListJobsParams(queue=queue, status=wanted, limit=limit, offset=offset, include_results=include_results)
        )
        # Also here, so a store that still reads the column cannot make a listing heavy.
        return [job_dict(row, with_result=include_results) for row in rows]

    async def cancel_job(self, job_id: str) -> bool:
        """Cancel a job: True when it was queued and is now `cancelled`, or is running and its
        worker was asked to stop it; False when it had already finished, or no job has the id
        (as soniq 0.1.0 answered; `cancel` raises for that instead)."""
        outcome = await self._request_cancel(job_id)
        if outcome is CancelOutcome.NOT_FOUND:
            logger.warning("cancel_job: no job has id %s; nothing cancelled", printable_id(job_id))
        return outcome in (CancelOutcome.CANCELLED, CancelOutcome.REQUESTED)

    async def cancel(self, job_id: str) -> CancelOutcome:
        """Cancel a job, whatever its status, and say what happened.

        `CANCELLED`: it was queued and is now `cancelled` (its dependents follow their policy).
        `REQUESTED`: it is running; its worker is told through the store and stops it (an async
        handler is cancelled, a sync one sees ``ctx.cancel_requested``), and the row ends
        `cancelled`, unless the job completes first. `ALREADY_FINISHED`: it was `done`,
        `cancelled` or dead-lettered; nothing changed. An id no job has is `JobNotFoundError`.

        On a backend without the `CancelChannel` role a queued job is still cancelled (through
        `QueueStore.cancel_job`), but a running one raises `MissingBackendRoleError` ("cancelling a
        running job") and keeps running.
        """
        outcome = await self._request_cancel(job_id)
        if outcome is CancelOutcome.NOT_FOUND:
            raise JobNotFoundError(str(job_id), f"cannot cancel job {job_id}: no job has that id")
        return outcome

    async def _request_cancel(self, job_id: str) -> CancelOutcome:
        key = lookup_id(job_id)
        if key is None:  # no stored row can have this id
            return CancelOutcome.NOT_FOUND
        backend = await self.connected_backend()
        outcome = await request_cancel(backend, key)
        if outcome is CancelOutcome.ALREADY_FINISHED:
            row = await backend.get_job(GetJobParams(job_id=key))
            if row is not None and row.status is JobStatus.CANCELLED:
                logger.info("job %s is already cancelled; nothing to do", job_id)
            else:
                ended = row.status.value if row is not None else "dead-lettered or deleted"
                logger.info("cancel lost the race: job %s already finished (%s)", job_id, ended)
        return outcome

    async def wait_for(self, job_id: str, timeout: float | None = None) -> Any:
        """Wait until the job finishes and return its result.

        Raises `JobFailedError` when it was dead-lettered, `JobCancelledError` when it was
        cancelled, `JobNotFoundError` when no job has the id or its row vanished (a job with
        ``result_ttl=0`` deletes its row as it completes), and `TimeoutError` after `timeout`
        seconds (None: no limit; 0: only look once). Woken by the store's push channel where it
        has one; however many jobs are waited for, one task per process watches them all.
        """
        limit = check_timeout(timeout)
        key = lookup_id(job_id)
        if key is None:  # no stored row can have this id: what an unknown id gives
            raise JobNotFoundError(str(job_id))
        loop = asyncio.get_running_loop()
        waiter = self._waiters.get(loop)
        if waiter is None:
            waiter = self._waiters[loop] = JobWaiter(self)
        return await waiter.wait(key, limit)

    async def get_queue_stats(self, queue: str | None = None) -> dict[str, int]:
        """Exactly ``total, queued, processing, done, dead_letter, cancelled``; a `queue` enqueue would
        refuse is `JobOptionsError`."""
        check_queue_filter(queue)
        backend = await self.connected_backend()
        return (await backend.queue_stats(QueueStatsParams(queue=queue))).to_dict()

    async def recover(self) -> RecoveryResult:
        """One stale-worker sweep now (what ``soniq recover`` runs), decided by `soniq.rescue`."""
        from soniq.worker.loops import sweep_once

        backend = await self.connected_backend()
        return await sweep_once(
            backend, self.bus, heartbeat_timeout=self.settings.heartbeat_timeout, policy=self.settings.stale_job_policy
        )

    # -- compat-jobs (issue 12): hooks, middleware and schedule, as in soniq 0.1.0 ------

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

    async def schedule(self, fn_or_name: Callable[..., Any] | str, run_at: ScheduleAt, /, **options: Any) -> str:
        """`enqueue` with ``scheduled_at=run_at`` (a datetime, a timedelta or seconds from now)."""
        if run_at is None:
            raise JobOptionsError("schedule() needs run_at: a datetime, a timedelta or a number of seconds from now")
        if "scheduled_at" in options:
            raise TypeError("schedule() takes the time as run_at; do not pass scheduled_at as well")
        return await self.enqueue(fn_or_name, scheduled_at=run_at, **options)

    # -- end compat-jobs --

    # -- the worker --------------------------------------------------------------

    def worker(
        self,
        *,
        concurrency: int | None = None,
        queues: Sequence[str] | None = None,
        run_once: bool = False,
        install_signal_handlers: bool = True,
    ) -> Worker:
        """A worker for this app, not started: ``await worker.run()``, and ``worker.stop()`` to drain it
        (a second `stop()` takes the force path). What `run_worker` builds and runs."""
        from soniq.worker.worker import Worker

        worker = Worker(
            self,
            concurrency=concurrency,
            queues=queues,
            run_once=run_once,
            install_signal_handlers=install_signal_handlers,
        )
        return worker

    async def run_worker(
        self,
        concurrency: int | None = None,
        queues: Sequence[str] | None = None,
        run_once: bool = False,
        *,
        install_signal_handlers: bool = True,
        shutdown_event: asyncio.Event | None = None,
    ) -> WorkerSummary:
        """Run a worker until SIGTERM/SIGINT (or, with `run_once`, until no job is due).

        With `shutdown_event` no signal handler is installed: setting the event drains the
        worker exactly as a first SIGTERM would (DRAINING, then the shutdown timeout's path).
        """
        if shutdown_event is not None:
            install_signal_handlers = False
        worker = self.worker(
            concurrency=concurrency, queues=queues, run_once=run_once, install_signal_handlers=install_signal_handlers
        )
        if shutdown_event is None:
            return await worker.run()
        return await run_until_event(worker, shutdown_event)

    @classmethod
    def instances(cls) -> list[Soniq]:
        return list(cls._instances)


async def request_cancel(backend: QueueStore, job_id: str) -> CancelOutcome:
    """Ask for the job to stop, whatever its status (`CancelChannel.request_cancel`), or on a backend
    without that role what `cancel_without_channel` can do."""
    if has_role(backend, CancelChannel):
        return await features.cancel_channel(backend).request_cancel(RequestCancelParams(job_id=job_id))
    return await cancel_without_channel(backend, job_id)


async def cancel_without_channel(backend: QueueStore, job_id: str) -> CancelOutcome:
    """`CancelChannel.request_cancel` for a backend without that role: a queued job is cancelled
    through `QueueStore.cancel_job`; a running one cannot be reached, which is
    `MissingBackendRoleError` ("cancelling a running job"). A job with no row in the jobs table is
    `ALREADY_FINISHED` when its dead-letter row can be read, else `NOT_FOUND`."""
    for _ in range(CANCEL_ATTEMPTS):
        if await backend.cancel_job(CancelJobParams(job_id=job_id)):
            return CancelOutcome.CANCELLED
        row = await backend.get_job(GetJobParams(job_id=job_id))
        if row is None:
            if has_role(backend, DeadLetterStore):
                dead_letters = features.dead_letter_store(backend)
                if await dead_letters.get_dead_letter(GetDeadLetterParams(job_id=job_id)) is not None:
                    return CancelOutcome.ALREADY_FINISHED
            return CancelOutcome.NOT_FOUND
        if row.status is JobStatus.PROCESSING:
            features.cancel_channel(backend)  # raises: nothing reaches its worker
        if row.status is not JobStatus.QUEUED:
            return CancelOutcome.ALREADY_FINISHED
        # Queued again (a nack or retry between the two reads): try the cancel once more.
    # Claimed every time it was read queued: it is running, as far as this call can tell.
    features.cancel_channel(backend)  # raises
    return CancelOutcome.ALREADY_FINISHED  # not reached


CANCEL_ATTEMPTS = 3
"""Without a CancelChannel, how often a cancel retries a row that went back to `queued` under it."""


def printable_id(job_id: object) -> str:
    """An id as a log line may carry it: control characters, NUL and lone surrogates escaped (a
    handler writing UTF-8 fails on a lone surrogate), and at most 100 characters of it."""
    text = str(job_id)
    return escape_line(text[:100]) + ("..." if len(text) > 100 else "")


def collapse_duplicates(jobs: list[NewJob]) -> tuple[list[NewJob], list[int]]:
    """The jobs to send (a later job repeating an earlier one's `dedup_key` is dropped) and,
    for each given job, the index of the sent job whose id it gets."""
    sent: list[NewJob] = []
    by_key: dict[str, int] = {}
    positions: list[int] = []
    for job in jobs:
        if job.dedup_key is not None and job.dedup_key in by_key:
            positions.append(by_key[job.dedup_key])
            continue
        if job.dedup_key is not None:
            by_key[job.dedup_key] = len(sent)
        positions.append(len(sent))
        sent.append(job)
    return sent, positions


def dead_letter_job_dict(row: DeadLetterRecord) -> dict[str, Any]:
    """A dead-letter row in the shape of `job_dict`, with ``status="dead_letter"`` and the
    dead-letter fields (`dead_letter_reason`, `moved_to_dead_letter_at`, `resurrection_count`,
    `last_resurrection_at`) added."""
    data = row.to_dict()
    data.update(
        status="dead_letter",
        result=None,
        worker_id=None,
        error_from_earlier_attempt=False,
    )
    return data


def job_dict(row: JobRecord, *, with_result: bool = True) -> dict[str, Any]:
    """A job row as the producer API returns it.

    `error_from_earlier_attempt` is True for a ``done`` row that still carries the `last_error`
    of an attempt that failed before the one that succeeded, so that text is not read as why it
    is in its state.
    """
    data = row.to_dict()
    if not with_result:
        data["result"] = None
    data["error_from_earlier_attempt"] = row.status is JobStatus.DONE and row.last_error is not None
    return data


# -- compat-jobs (issue 12): fn.enqueue(...) and fn.options(...).enqueue(...) --


class BoundEnqueue:
    """What ``fn.options(...)`` returns: `enqueue` (and `enqueue_sync`) with those options fixed."""

    __slots__ = ("_app", "_fn", "_options")

    def __init__(self, app: Soniq, fn: Callable[..., Any], options: Mapping[str, Any]) -> None:
        self._app = app
        self._fn = fn
        self._options = dict(options)

    async def enqueue(self, *args: Any, **kwargs: Any) -> str:
        _keywords_only(self._fn, args)
        return await self._app.enqueue(self._fn, **self._options, args=kwargs)

    def enqueue_sync(self, *args: Any, **kwargs: Any) -> str:
        _keywords_only(self._fn, args)
        return self._app.enqueue_sync(self._fn, **self._options, args=kwargs)

    def call(self, *args: Any, **kwargs: Any) -> JobCall:
        """This call described, for `app.chain`, with the options' queue, priority and scheduled_at."""
        _keywords_only(self._fn, args)
        extra = sorted(k for k in self._options if k not in _CALL_OPTIONS)
        if extra:
            raise TypeError(f"a chain step takes queue, priority and scheduled_at only; got {', '.join(extra)}")
        return JobCall(self._fn, kwargs, **{k: v for k, v in self._options.items() if k in _CALL_OPTIONS})


_CALL_OPTIONS = ("queue", "priority", "scheduled_at")


def _keywords_only(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    if args:
        raise TypeError(
            f"{getattr(fn, '__name__', fn)}.enqueue() takes the job's arguments as keywords only; "
            f"got {len(args)} positional argument(s)"
        )


def add_enqueue_helpers(app: Soniq, fn: Callable[..., Any]) -> None:
    """Give a registered function `enqueue` and `options` (never over an attribute it already has)."""

    def options(
        *,
        queue: str | None = None,
        priority: int | None = None,
        scheduled_at: ScheduleAt = None,
        unique: bool | None = None,
        dedup_key: str | None = None,
        connection: Any = None,
        depends_on: DependsOn = None,
        dependency_policy: DependencyPolicy | str | None = None,
    ) -> BoundEnqueue:
        chosen: dict[str, Any] = {"queue": queue, "priority": priority, "scheduled_at": scheduled_at}
        # Passed on only when given, so the enqueue signature decides what they mean.
        given = (
            ("unique", unique),
            ("dedup_key", dedup_key),
            ("connection", connection),
            ("depends_on", depends_on),
            ("dependency_policy", dependency_policy),
        )
        for key, value in given:
            if value is not None:
                chosen[key] = value
        return BoundEnqueue(app, fn, chosen)

    plain = BoundEnqueue(app, fn, {})
    for attribute, value in (("enqueue", plain.enqueue), ("options", options), ("call", plain.call)):
        if not hasattr(fn, attribute):
            try:
                setattr(fn, attribute, value)
            except (AttributeError, TypeError):  # a builtin or a slotted callable: no helpers, enqueue still works
                return


# -- end compat-jobs --
