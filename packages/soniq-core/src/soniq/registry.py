"""The job registry: what `@app.job` records about each function."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from soniq.context import context_parameter
from soniq.errors import InvalidArgumentsError as InvalidArgumentsError
from soniq.errors import UnknownJobError
from soniq.limits import JobLimits, job_limits
from soniq.outcomes import HandlerKind
from soniq.validation import JobOptionsError, check_job_timeout
from soniq.windows import NO_TIMING, KeyTiming


@dataclass(frozen=True, slots=True)
class CallShape:
    """What keyword arguments a signature takes, as sets: a call that names every required
    parameter and only known ones fits, and `Signature.bind` is needed only to word an error."""

    accepted: frozenset[str]
    required: frozenset[str]
    positional_only: frozenset[str]
    """Names `Signature.bind` refuses as keywords even beside ``**kwargs``."""
    any_keyword: bool
    """The signature has ``**kwargs``: any further name fits."""
    usable: bool
    """False when keywords alone cannot decide (a positional-only parameter without a default)."""

    @classmethod
    def of(cls, signature: inspect.Signature) -> CallShape:
        accepted: set[str] = set()
        required: set[str] = set()
        positional_only: set[str] = set()
        any_keyword = False
        usable = True
        for name, parameter in signature.parameters.items():
            kind = parameter.kind
            if kind is parameter.VAR_KEYWORD:
                any_keyword = True
            elif kind is parameter.VAR_POSITIONAL:
                continue
            elif kind is parameter.POSITIONAL_ONLY:
                positional_only.add(name)
                if parameter.default is parameter.empty:
                    usable = False
            else:
                accepted.add(name)
                if parameter.default is parameter.empty:
                    required.add(name)
        return cls(frozenset(accepted), frozenset(required), frozenset(positional_only), any_keyword, usable)

    def fits(self, kwargs: Mapping[str, Any]) -> bool:
        if not self.usable:
            return False
        names = kwargs.keys()
        if not self.required <= names or not self.positional_only.isdisjoint(names):
            return False
        return self.any_keyword or names <= self.accepted


@dataclass(frozen=True, slots=True)
class JobDefinition:
    name: str
    func: Callable[..., Any]
    queue: str
    max_retries: int
    priority: int
    timeout: float | None
    is_async: bool
    # -- 0.1.0's decorator options --
    retry_delay: float | tuple[float, ...] | None = None
    retry_backoff: bool = False
    retry_max_delay: float | None = None
    retry_jitter: bool = True
    retry_options_set: bool = False
    """The job set one of the retry options above: they choose its delays instead of the settings' backoff."""
    args_model: type[Any] | None = None
    """A pydantic model the arguments are checked against at enqueue and again in the worker."""
    unique: bool = False
    context_param: str | None = None
    """The handler parameter annotated `JobContext`, which the worker fills in."""
    call_signature: inspect.Signature | None = field(default=None, compare=False)
    """The handler's signature without the `JobContext` parameter: enqueue binds arguments against it."""
    call_shape: CallShape | None = field(default=None, compare=False)
    """`call_signature` reduced to the sets enqueue checks keyword arguments against."""
    plain: bool = True
    """Nothing to do around the call (no model to check, no context to inject): a field, not a
    property, since the worker reads it for every run."""
    # -- fleet-wide limits --
    limits: JobLimits | None = None
    """The job's own `max_concurrent` / `rate_limit` / `limit_key`, or None (the common case)."""
    # -- job versions --
    version: int = 1
    """The version of the job's code: rows it enqueues carry it, and its workers run rows up to it."""
    upgrades: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] = field(default_factory=dict, compare=False)
    """``{old: fn}``: `fn` takes the arguments of a version-`old` row to version ``old + 1``."""
    encrypted: bool = False
    """Arguments, result and progress message stored sealed (`soniq.encryption`)."""
    # -- unique windows and debounce --
    timing: KeyTiming = NO_TIMING
    """The job's own `unique_for` or `debounce` (and `debounce_max_wait`); inactive by default."""

    def job_meta(self) -> dict[str, Any]:
        """The job's options under 0.1.0's names, as its `retry_policy.delay_for` received them."""
        return {
            "func": self.func,
            "name": self.name,
            "max_retries": self.max_retries,
            "args_model": self.args_model,
            "priority": self.priority,
            "queue": self.queue,
            "unique": self.unique,
            "retry_delay": list(self.retry_delay) if isinstance(self.retry_delay, tuple) else self.retry_delay,
            "retry_backoff": self.retry_backoff,
            "retry_max_delay": self.retry_max_delay,
            "retry_jitter": self.retry_jitter,
            "timeout": self.timeout,
        }

    def bind_arguments(self, kwargs: Mapping[str, Any]) -> None:
        """Raise `JobOptionsError` when `kwargs` would not fit the handler (checked at enqueue):
        against the job's `args_model` when it has one, else against the handler's signature."""
        if self.args_model is not None:
            try:
                self.args_model(**kwargs)
            except Exception as exc:
                raise JobOptionsError(
                    f"invalid arguments for job {self.name!r} (args_model {self.args_model.__name__}): {exc}"
                ) from None
            return
        if self.call_signature is None:
            return
        shape = self.call_shape
        if shape is not None and shape.fits(kwargs):
            return  # the common case, without building a BoundArguments (issue 29)
        parameters = self.call_signature.parameters
        expected = ", ".join(parameters) or "no arguments"
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            unknown = [key for key in kwargs if key not in parameters]
            if unknown:
                raise JobOptionsError(
                    f"invalid arguments for job {self.name!r}: unexpected {', '.join(map(repr, unknown))} "
                    f"(it takes: {expected})"
                )
        try:
            self.call_signature.bind(**kwargs)
        except TypeError as exc:
            raise JobOptionsError(f"invalid arguments for job {self.name!r}: {exc} (it takes: {expected})") from None

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
    check_job_timeout(timeout)


class JobRegistry:
    def __init__(self) -> None:
        self._jobs: dict[str, JobDefinition] = {}
        self._internal: dict[str, JobDefinition] = {}
        """Core's own jobs (a batch's finisher): run by every worker that runs any job, and left
        out of `names`, `definitions` and `len`, which list the application's jobs."""
        self.changes = 0
        """Bumped by every `add`, so derived views (the app's group limits) know when to rebuild."""

    def add(
        self,
        func: Callable[..., Any],
        *,
        name: str | None,
        queue: str,
        max_retries: int,
        priority: int,
        timeout: float | None,
        extra: Mapping[str, Any] | None = None,
        internal: bool = False,
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
        if not internal and job_name in self._internal:
            raise JobOptionsError(f"the job name {job_name!r} is Soniq's own; choose another name")
        existing = self._jobs.get(job_name)
        if existing is not None and existing.func is not func:
            raise ValueError(f"a job named {job_name!r} is already registered ({default_job_name(existing.func)})")
        fields = compat_fields(func, extra or {})
        options = extra or {}
        version, upgrades = check_job_version(options.get("version", 1), options.get("upgrades"))
        if version > 1:
            fields["version"] = version
            fields["upgrades"] = upgrades
        encrypted = options.get("encrypted", False)
        if not isinstance(encrypted, bool):
            raise JobOptionsError(f"encrypted must be True or False, got {encrypted!r}")
        if encrypted:
            fields["encrypted"] = True
        timing = KeyTiming.of(
            unique_for=options.get("unique_for"),
            debounce=options.get("debounce"),
            debounce_max_wait=options.get("debounce_max_wait"),
        )
        if timing.active:
            fields["timing"] = timing
        limits = job_limits(
            func,
            max_concurrent=options.get("max_concurrent"),
            rate_limit=options.get("rate_limit"),
            limit_key=options.get("limit_key"),
            signature=fields.get("call_signature"),
            args_model=fields.get("args_model"),
        )
        definition = JobDefinition(
            name=job_name,
            func=func,
            queue=queue,
            max_retries=max_retries,
            priority=priority,
            timeout=check_job_timeout(timeout),
            is_async=inspect.iscoroutinefunction(func),
            limits=limits,
            **fields,
        )
        if internal:
            self._internal[job_name] = definition
            return definition
        self._jobs[job_name] = definition
        self.changes += 1
        return definition

    def definitions(self) -> list[JobDefinition]:
        """Every registered job, in name order."""
        return [self._jobs[name] for name in sorted(self._jobs)]

    def get(self, name: str) -> JobDefinition | None:
        return self._jobs.get(name) or self._internal.get(name)

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

    def runnable_names(self) -> list[str]:
        """What a worker claims: the application's jobs and, when it has any, core's own."""
        return sorted([*self._jobs, *self._internal]) if self._jobs else []

    def modules(self) -> set[str]:
        return {d.func.__module__ for d in self._jobs.values()}

    def __len__(self) -> int:
        return len(self._jobs)


# -- checking 0.1.0's decorator options --

_RETRY_OPTIONS = ("retry_delay", "retry_backoff", "retry_max_delay", "retry_jitter")


def _seconds(option: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
        raise JobOptionsError(f"{option} must be a finite number of seconds >= 0, got {value!r}")
    if value < 0:
        raise JobOptionsError(f"{option} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


MAX_JOB_VERSION = 10_000
"""The highest `version=` a job may declare."""


def check_job_version(version: Any, upgrades: Any) -> tuple[int, dict[int, Callable[[dict[str, Any]], dict[str, Any]]]]:
    """`version=` and `upgrades=` of ``@app.job``, checked: an error names the option at fault."""
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_JOB_VERSION:
        raise JobOptionsError(f"version must be a whole number from 1 to {MAX_JOB_VERSION}, got {version!r}")
    if upgrades is None:
        upgrades = {}
    if not isinstance(upgrades, Mapping):
        raise JobOptionsError(f"upgrades must be a dict of {{old_version: fn}}, got {type(upgrades).__name__}")
    checked: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
    for key, fn in upgrades.items():
        if isinstance(key, bool) or not isinstance(key, int) or not 1 <= key < version:
            raise JobOptionsError(
                f"upgrades keys must be versions from 1 to {version - 1} (each upgrades a row of that version "
                f"to the next; this job is version={version}), got {key!r}"
            )
        if not callable(fn):
            raise JobOptionsError(f"upgrades[{key}] must be a function taking the arguments dict, got {fn!r}")
        checked[key] = fn
    if checked:
        missing = [old for old in range(min(checked), version) if old not in checked]
        if missing:
            links = ", ".join(f"{old}->{old + 1}" for old in missing)
            raise JobOptionsError(
                f"upgrades has a gap: the chain from version {min(checked)} to version={version} lacks {links}; "
                f"give upgrades for every version from {min(checked)} to {version - 1}"
            )
    return version, dict(sorted(checked.items()))


def validated_arguments(definition: JobDefinition, args: Mapping[str, Any]) -> dict[str, Any]:
    """`args` checked against the job's model, as the model dumps them (so coerced values reach the handler)."""
    model = definition.args_model
    if model is None:
        return dict(args)
    try:
        checked: dict[str, Any] = model(**args).model_dump()
    except Exception as exc:
        raise InvalidArgumentsError(
            f"the arguments of job {definition.name!r} do not match its args_model {model.__name__}: {exc}"
        ) from exc
    return checked


def check_args_model(option: str, model: Any) -> type[Any]:
    """A pydantic model class; pydantic is imported only here, when a job asks for one."""
    try:
        import pydantic
    except ImportError:
        raise JobOptionsError(
            f"{option}= needs pydantic, which is not installed: pip install 'soniq-core[pydantic]'"
        ) from None
    if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
        raise JobOptionsError(f"{option} must be a pydantic BaseModel subclass, got {model!r}")
    return model


def compat_fields(func: Callable[..., Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """The `JobDefinition` fields from the 0.1.0 options in `extra`, checked (an error names the option)."""
    fields: dict[str, Any] = {}
    retry_delay = extra.get("retry_delay")
    if retry_delay is not None:
        if isinstance(retry_delay, (list, tuple)):
            if not retry_delay:
                raise JobOptionsError("retry_delay must be seconds or a non-empty list of seconds, got []")
            fields["retry_delay"] = tuple(_seconds("retry_delay", item) for item in retry_delay)
        else:
            fields["retry_delay"] = _seconds("retry_delay", retry_delay)
    for flag in ("retry_backoff", "retry_jitter", "unique"):
        value = extra.get(flag)
        if value is not None:
            if not isinstance(value, bool):
                raise JobOptionsError(f"{flag} must be True or False, got {value!r}")
            fields[flag] = value
    if extra.get("retry_max_delay") is not None:
        fields["retry_max_delay"] = _seconds("retry_max_delay", extra["retry_max_delay"])
    fields["retry_options_set"] = any(extra.get(option) is not None for option in _RETRY_OPTIONS)
    model = extra.get("args_model")
    if model is not None:
        fields["args_model"] = check_args_model(extra.get("args_model_option", "args_model"), model)
    fields["context_param"] = context_parameter(func)
    fields["plain"] = fields.get("args_model") is None and fields["context_param"] is None
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        kept = [p for n, p in signature.parameters.items() if n != fields["context_param"]]
        fields["call_signature"] = signature.replace(parameters=kept)
        fields["call_shape"] = CallShape.of(fields["call_signature"])
    return fields
