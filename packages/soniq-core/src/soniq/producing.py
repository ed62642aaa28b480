"""The producer API of `Soniq`: `enqueue`, `enqueue_many`, `chain` and their sync variants.

`Producing` is a mixin of `Soniq`; each method is documented where it is defined here. A
registered function's own helpers (``fn.enqueue``, ``fn.options(...).enqueue``, ``fn.call``)
are `add_enqueue_helpers`' and `BoundEnqueue`'s, at the end.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from soniq import features
from soniq.backend import DebouncedJobs, UniqueWindows, VersionedJobs, require_role
from soniq.dedup import resolve_dedup_key
from soniq.dependencies import DependsOn, JobCall, check_batch, check_policy, normalize_depends_on
from soniq.encryption import cipher_for
from soniq.errors import SoniqError, UnknownJobError
from soniq.observers import EnqueueEvent
from soniq.params import EnqueueJobsParams
from soniq.records import DependencyPolicy, NewJob
from soniq.registry import JobDefinition, default_job_name
from soniq.routing import TaskRef, resolve_producer_id
from soniq.serialization import new_job_ids
from soniq.validation import JobOptionsError, check_priority, check_queue_name, encode_args, resolve_scheduled_at
from soniq.windows import NO_TIMING, KeyTiming, timing_key

if TYPE_CHECKING:
    from soniq.backend import QueueStore
    from soniq.bus import ObservationBus
    from soniq.registry import JobRegistry
    from soniq.settings import Settings
    from soniq.sync_bridge import SyncBridge

__all__ = ["BoundEnqueue", "Producing", "ScheduleAt", "add_enqueue_helpers", "collapse_duplicates"]

ScheduleAt = datetime | timedelta | int | float | None


class Producing:
    """Putting jobs in the queue; a mixin of `Soniq`."""

    if TYPE_CHECKING:
        settings: Settings
        registry: JobRegistry
        _sync: SyncBridge

        @property
        def backend(self) -> QueueStore: ...

        @property
        def bus(self) -> ObservationBus: ...

        async def connected_backend(self) -> QueueStore: ...

        def _definition_for_name(self, target: str | TaskRef) -> JobDefinition: ...

        @staticmethod
        def _ref_args(target: object, kwargs: Mapping[str, Any]) -> Mapping[str, Any]: ...

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
        unique_for: float | None = None,
        debounce: float | None = None,
        debounce_max_wait: float | None = None,
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

        `unique_for`, `debounce` and `debounce_max_wait` (seconds) override the job's own (see
        `Soniq.job`): within a window, or while a debounced run is still queued, the enqueue
        returns the id of the job holding the key.
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
            timing=_call_timing(unique_for, debounce, debounce_max_wait),
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
        unique_for: float | None = None,
        debounce: float | None = None,
        debounce_max_wait: float | None = None,
    ) -> list[str]:
        """Queue many runs of one job in one insert (all or none); returns their ids in order.

        With `unique=True`, items whose arguments repeat an earlier item (or a queued job) get
        that job's id; their positions in the returned list say so. `depends_on` and
        `dependency_policy` (see `enqueue`) apply to every item, and so do `unique_for` and
        `debounce`: items sharing a key get one id (a debounced one, the last item's arguments).
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
            timing=_call_timing(unique_for, debounce, debounce_max_wait),
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
                timing=NO_TIMING,
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
        unique_for: float | None = None,
        debounce: float | None = None,
        debounce_max_wait: float | None = None,
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
            unique_for=unique_for,
            debounce=debounce,
            debounce_max_wait=debounce_max_wait,
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
        unique_for: float | None = None,
        debounce: float | None = None,
        debounce_max_wait: float | None = None,
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
            unique_for=unique_for,
            debounce=debounce,
            debounce_max_wait=debounce_max_wait,
        )
        return self._sync.run(coroutine, what="enqueue_many")

    def _definition(self, fn_or_name: Callable[..., Any] | str | TaskRef) -> JobDefinition:
        if isinstance(fn_or_name, (str, TaskRef)):
            return self._definition_for_name(fn_or_name)  # another service's job, by name
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
        timing: KeyTiming | None = None,
    ) -> list[NewJob]:
        """Validate and build rows; everything shared by the batch is worked out once.

        A job without dependencies and without a `limit_key` gets neither field set (the common case).
        `timing` None means the job's own `unique_for` / `debounce`; `NO_TIMING` means none."""
        if producer_id is None:  # every row says which producer wrote it
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
        timing = definition.timing if timing is None else timing
        now: datetime | None = None  # only a window or debounce reads the clock here
        if timing.active:
            _check_timing(timing, scheduled_at=scheduled_at, depends_on=depends_on)
            now = datetime.now(UTC)
        # An encrypted job's arguments are sealed last, after every key was derived from them.
        cipher = (
            cipher_for(self.settings.encryption_keys) if definition.encrypted or self.settings.encrypt_all else None
        )
        ids = new_job_ids(len(kwargs_list))
        limits = definition.limits
        keyed = limits if limits is not None and limits.limit_key is not None else None
        plain = keyed is None and not depends_on
        jobs = []
        for index, kwargs in enumerate(kwargs_list):
            if not isinstance(kwargs, Mapping):
                raise TypeError(f"enqueue_many item {index} must be a dict of keyword arguments, got {kwargs!r}")
            checked, encoded = encode_args(name, kwargs, max_bytes=limit)
            definition.bind_arguments(kwargs)  # a wrong argument name fails here, before anything is stored
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
                version=definition.version,
            )
            if not plain:  # only jobs with dependencies or a partitioned limit pay for this
                job = dataclasses.replace(
                    job,
                    depends_on=depends_on,
                    dependency_policy=dependency_policy,
                    limit_key=keyed.key_for(name, checked) if keyed is not None else None,
                )
            if now is not None:
                key = timing_key(timing, name, checked, dedup_key=dedup_key, signature=definition.call_signature)
                job = timing.apply(job, key, now)
            if cipher is not None:
                sealed = cipher.seal(checked)
                job = dataclasses.replace(job, args=sealed, args_json=json.dumps(sealed, separators=(",", ":")))
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
        if any(job.unique_window is not None for job in jobs):
            protocol_windows: Any = UniqueWindows
            require_role(self.backend, protocol_windows, "unique windows (unique_for=)")
        if any(job.debounce_deadline is not None for job in jobs):
            protocol_debounce: Any = DebouncedJobs
            require_role(self.backend, protocol_debounce, "debounce (debounce=)")
        if any(job.version > 1 for job in jobs):
            protocol: Any = VersionedJobs  # a protocol class in the call trips mypy's type-abstract check
            require_role(self.backend, protocol, "job versions (version= above 1)")

    def _check_connection(self, connection: Any) -> None:
        if connection is not None and not self.backend.capabilities.transactional_enqueue:
            raise SoniqError(
                f"{type(self.backend).__name__} does not support transactional enqueue (connection=...); "
                "use a backend whose capabilities include transactional_enqueue, such as soniq-postgres"
            )

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


def collapse_duplicates(jobs: list[NewJob]) -> tuple[list[NewJob], list[int]]:
    """The jobs to send (a later job repeating an earlier one's `dedup_key` or window key is
    dropped; a repeated debounced job lends its arguments and start to the earlier one, as a
    repeat enqueue would) and, for each given job, the index of the sent job whose id it gets."""
    sent: list[NewJob] = []
    by_key: dict[tuple[bool, str], int] = {}
    positions: list[int] = []
    for job in jobs:
        window = job.unique_window
        key = (True, window.key) if window is not None else (False, job.dedup_key) if job.dedup_key else None
        if key is not None and key in by_key:
            index = by_key[key]
            positions.append(index)
            first = sent[index]
            if job.debounce_deadline is not None and first.debounce_deadline is not None:
                start = min(job.scheduled_at, first.debounce_deadline)
                sent[index] = dataclasses.replace(first, args=job.args, args_json=job.args_json, scheduled_at=start)
            continue
        if key is not None:
            by_key[key] = len(sent)
        positions.append(len(sent))
        sent.append(job)
    return sent, positions


def _call_timing(unique_for: object, debounce: object, debounce_max_wait: object) -> KeyTiming | None:
    """The timing an enqueue gives, which replaces the job's own; None when it gives none."""
    if unique_for is None and debounce is None and debounce_max_wait is None:
        return None
    return KeyTiming.of(unique_for=unique_for, debounce=debounce, debounce_max_wait=debounce_max_wait)


def _check_timing(timing: KeyTiming, *, scheduled_at: object, depends_on: tuple[str, ...]) -> None:
    """Refuse what a window or debounce cannot be combined with, naming both options."""
    option = "unique_for" if timing.unique_for is not None else "debounce"
    if depends_on:
        raise JobOptionsError(
            f"{option} cannot be combined with depends_on: a job that waits for others is never "
            "deduplicated; enqueue it without one of them"
        )
    if timing.debounce is not None and scheduled_at is not None:
        raise JobOptionsError(
            "debounce cannot be combined with scheduled_at: a debounced job starts debounce seconds "
            "after its latest enqueue (at most debounce_max_wait after its first)"
        )


class BoundEnqueue:
    """What ``fn.options(...)`` returns: `enqueue` (and `enqueue_sync`) with those options fixed."""

    __slots__ = ("_app", "_fn", "_options")

    def __init__(self, app: Producing, fn: Callable[..., Any], options: Mapping[str, Any]) -> None:
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


def add_enqueue_helpers(app: Producing, fn: Callable[..., Any]) -> None:
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
        unique_for: float | None = None,
        debounce: float | None = None,
        debounce_max_wait: float | None = None,
    ) -> BoundEnqueue:
        chosen: dict[str, Any] = {"queue": queue, "priority": priority, "scheduled_at": scheduled_at}
        # Passed on only when given, so the enqueue signature decides what they mean.
        given = (
            ("unique", unique),
            ("dedup_key", dedup_key),
            ("connection", connection),
            ("depends_on", depends_on),
            ("dependency_policy", dependency_policy),
            ("unique_for", unique_for),
            ("debounce", debounce),
            ("debounce_max_wait", debounce_max_wait),
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
