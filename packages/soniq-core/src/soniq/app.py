"""The `Soniq` app: its construction, registry, backend and lifecycle, and the worker it builds.

`Soniq` is composed of mixins, each in its own module and documented there: the producer API
(`enqueue`, `enqueue_many`, `chain`, the sync variants) in `soniq.producing`, the read API
(`get_job`, `get_result`, `list_jobs`, `cancel`, `wait_for`, `get_queue_stats`, ...) in
`soniq.reading`, and what soniq 0.1.0 code relies on (hooks, middleware, `schedule`, ...) in
`soniq.compat.app`. The services the app makes (`dead_letter`, `scheduler`, the workers, the
sync bridge, the waiters) are built from its `AppContext`, never from the app itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, overload

from soniq import features
from soniq.app_context import AppContext
from soniq.backend import QueueStore, check_backend
from soniq.backend_names import pool_options
from soniq.batches import Batching, register_finisher
from soniq.bus import ObservationBus
from soniq.compat.app import CompatApp, backend_from_argument, job_budget
from soniq.dead_letter import DeadLetterService
from soniq.discovery import create_backend, load_observer_factories
from soniq.errors import SoniqError
from soniq.job_views import dead_letter_job_dict as dead_letter_job_dict
from soniq.job_views import job_dict as job_dict
from soniq.metrics import MetricsSink, NullMetricsSink
from soniq.observers import Observer
from soniq.params import GroupLimit, SetupSchemaParams
from soniq.producing import add_enqueue_helpers
from soniq.queue_pause import QueuePausing
from soniq.reading import Reading
from soniq.reading import request_cancel as request_cancel
from soniq.records import SchemaReport, SchemaStatus
from soniq.redaction import redact_url
from soniq.registry import JobRegistry
from soniq.scheduling.catchup import check_catch_up
from soniq.scheduling.service import PeriodicSpec, Scheduler
from soniq.scheduling.timing import Timing
from soniq.settings import Settings
from soniq.sync_bridge import SyncBridge
from soniq.validation import JobOptionsError, check_priority, check_queue_name
from soniq.waiting import JobWaiter
from soniq.worker.worker import Worker
from soniq.worker_event import run_until_event

if TYPE_CHECKING:
    from soniq.worker.summary import WorkerSummary

logger = logging.getLogger("soniq")

F = TypeVar("F", bound=Callable[..., Any])


class Soniq(Batching, Reading, QueuePausing, CompatApp):
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
        backend = backend_from_argument(backend, database_url, settings)
        self.settings = Settings.load(settings)
        self.backend_options: dict[str, Any] = pool_options(self.settings, backend_options)
        if backend is not None:
            check_backend(backend)
        self._backend: QueueStore | None = backend
        self._backend_from_url = backend is None
        self.registry = JobRegistry()
        register_finisher(self)
        self.metrics: MetricsSink = metrics_sink or NullMetricsSink()
        # `observers` (SONIQ_OBSERVERS) is the setting naming entry points to load; objects come in here.
        self.observers: list[Observer] = list(extra_observers or [])
        for _name, factory in load_observer_factories(self.settings.observers):
            self.observers.append(factory(self.settings))
        self._init_compat(retry_policy=retry_policy, metrics_sink=metrics_sink)
        self._connected = False
        self._closed = False  # `close()` sets it, the next `connect()` clears it
        # One lock per event loop: a lock made on the first loop cannot be awaited on another.
        self._connect_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._sync_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._bus: ObservationBus | None = None
        self._bus_key: tuple[tuple[Observer, ...], MetricsSink] | None = None
        self._scheduler: Scheduler | None = None
        self.context = AppContext(
            get_registry=lambda: self.registry,
            get_settings=lambda: self.settings,
            get_backend=lambda: self.backend,
            get_bus=lambda: self.bus,
            connect=self.connect,
            connected_backend=self.connected_backend,
            new_backend_instance=self.new_backend_instance,
            get_scheduler=lambda: self.scheduler,
            get_sync_pool=lambda: self.sync_pool,
            group_limits=self.group_limits,
        )
        """What the app's services are built from (see `soniq.app_context`)."""
        self.dead_letter = DeadLetterService(self.context)
        self._sync = SyncBridge(self.context)
        # One `wait_for` service per event loop (see soniq.waiting).
        self._waiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, JobWaiter] = weakref.WeakKeyDictionary()
        Soniq._instances.add(self)

    def __repr__(self) -> str:
        return f"<Soniq {redact_url(self.settings.resolved_database_url)!r} jobs={len(self.registry)}>"

    @classmethod
    def instances(cls) -> list[Soniq]:
        return list(cls._instances)

    # -- registering jobs ----------------------------------------------------------

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
        version: int = 1,
        upgrades: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
        unique_for: float | None = None,
        debounce: float | None = None,
        debounce_max_wait: float | None = None,
        encrypted: bool = False,
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
        version: int = 1,
        upgrades: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
        unique_for: float | None = None,
        debounce: float | None = None,
        debounce_max_wait: float | None = None,
        encrypted: bool = False,
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

        `version` (default 1) is the version of the job's code; rows carry the version that
        enqueued them. `upgrades` maps each older version `old` to a function taking a row's
        arguments dict from `old` to ``old + 1``: a worker runs older rows through the chain
        before calling the handler, and never claims a row newer than its own version.

        `unique_for` (seconds) enqueues at most one run per key per window, whatever becomes of
        it; `debounce` (seconds) makes a repeat enqueue replace the queued run's arguments and
        push its start, never past the first enqueue plus `debounce_max_wait` (default ten times
        `debounce`). The key is the enqueue's `dedup_key`, else the job's name and its bound
        arguments. Either can be given per enqueue too; see docs/user-guide.md.

        `encrypted=True` stores the job's arguments, result and progress message sealed with the
        first of the `encryption_keys` setting (Fernet; ``pip install 'soniq-core[encryption]'``);
        without a key it is refused here.
        """
        budget, model, model_option = job_budget(
            retries=retries, max_retries=max_retries, args_model=args_model, validate=validate
        )
        extra: dict[str, Any] = {
            "retry_delay": retry_delay,
            "retry_backoff": retry_backoff,
            "retry_max_delay": retry_max_delay,
            "retry_jitter": retry_jitter,
            "unique": unique,
            "args_model": model,
            "args_model_option": model_option,
            "max_concurrent": max_concurrent,
            "rate_limit": rate_limit,
            "limit_key": limit_key,
            "version": version,
            "upgrades": upgrades,
            "unique_for": unique_for,
            "debounce": debounce,
            "debounce_max_wait": debounce_max_wait,
            "encrypted": encrypted,
        }

        def register(fn: F) -> F:
            job_queue = self._name_and_queue(fn, name, queue)
            check_queue_name(job_queue, what="job queue")
            check_priority(priority)
            if encrypted is True and not self.settings.encryption_keys:
                raise JobOptionsError(
                    "encrypted=True needs the encryption_keys setting (SONIQ_ENCRYPTION_KEYS): there is no key "
                    "to seal with; make one with `soniq keys generate`"
                )
            self.registry.add(
                fn, name=name, queue=job_queue, max_retries=budget, priority=priority, timeout=timeout, extra=extra
            )
            add_enqueue_helpers(self, fn)
            return fn

        if func is not None:
            return register(func)
        return register

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

    @property
    def scheduler(self) -> Scheduler:
        """The schedules in the store: ``await app.scheduler.add(job, every=60)``, `pause`, `list`..."""
        if self._scheduler is None:
            self._scheduler = Scheduler(self.context)
        return self._scheduler

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

    # -- configuration -------------------------------------------------------------

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

    # -- backend and lifecycle -------------------------------------------------------

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

    def close_sync(self) -> None:
        """Stop the `enqueue_sync` thread and close its backend (what `close()` does for that part)."""
        self._sync.close()

    async def __aenter__(self) -> Soniq:
        await self.connect()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- the worker ----------------------------------------------------------------

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
        worker = Worker(
            self.context,
            reads=self,
            retry_policy=self.retry_policy,
            middleware=self.middleware_chain,
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
