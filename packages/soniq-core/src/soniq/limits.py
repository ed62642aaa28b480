"""Fleet-wide limits: what `@app.job` and the `queue_limits` setting declare.

The store enforces every limit inside the claim (`Backend.claim_jobs`, `GroupLimit`); core
only parses and checks the declarations, once, at decoration or at construction, so a limit
that cannot be enforced (zero or below, an unknown period, a key naming no argument) fails
there with `InvalidLimitError` and never reaches a worker. At enqueue core works out each
row's `limit_key`, the partition of a partitioned limit, from the job's arguments.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from soniq.errors import InvalidLimitError
from soniq.params import GroupLimit, LimitScope
from soniq.validation import JobOptionsError

if TYPE_CHECKING:
    from soniq.backend import QueueStore

MAX_LIMIT_KEY_LENGTH = 255
"""The longest `limit_key` a row stores (as `dedup_key`): a longer computed key is refused at enqueue."""

MAX_LIMIT_COUNT = 1_000_000_000
"""The largest `max_concurrent` and `rate_limit` count: below 2**31, so every store counts it exactly."""
MIN_RATE_PERIOD = 0.001
"""The shortest `rate_limit` period, 1 ms."""
MAX_RATE_PERIOD = 30 * 86400.0
"""The longest `rate_limit` period, 30 days. Periods are whole milliseconds, which every
store holds exactly (SQLite and Redis count windows in microseconds, PostgreSQL and memory in seconds)."""
MAX_RATE_TEXT = 64
"""The longest `rate_limit` string read (``"10/5s"``); a longer one is refused before it is parsed."""

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"^\s*(\d{1,12})\s*/\s*(\d{1,12}(?:\.\d{1,12})?)?\s*([smh])\s*$", re.ASCII)

RateLimit = str | tuple[int, float]
LimitKey = str | Callable[[Mapping[str, Any]], Any]


def parse_rate_limit(value: object, *, what: str = "rate_limit") -> tuple[int, float]:
    """``"N/s"``, ``"N/m"``, ``"N/h"``, ``"N/<k>s"`` (``"10/5s"``: ten per five seconds; ``<k>m`` and
    ``<k>h`` too) or ``(count, seconds)``, as ``(count, period_seconds)``.

    The count is a whole number from 1 to `MAX_LIMIT_COUNT`; the period a whole number of
    milliseconds from `MIN_RATE_PERIOD` (1 ms) to `MAX_RATE_PERIOD` (30 days). Anything else is
    `InvalidLimitError` naming the value, so no store is ever asked to enforce a limit it cannot."""
    if isinstance(value, str):
        match = _RATE.match(value) if len(value) <= MAX_RATE_TEXT else None
        if match is None:
            raise InvalidLimitError(
                f"{what} must look like '10/s', '100/m', '1000/h' or '10/5s' (count per period), got {shown(value)}"
            )
        count = int(match.group(1))
        period = float(match.group(2) or 1) * _UNITS[match.group(3)]
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        count, period = _count(value[0], what), _period(value[1], what)
    else:
        raise InvalidLimitError(
            f"{what} must be a string such as '10/s' or a (count, seconds) pair, got {shown(value)}"
        )
    if count < 1:
        raise InvalidLimitError(f"{what} must allow at least 1 start per period, got {shown(value)}")
    if count > MAX_LIMIT_COUNT:
        raise InvalidLimitError(f"{what} must allow at most {MAX_LIMIT_COUNT:,} starts per period, got {shown(value)}")
    return count, check_rate_period(period, what=what, given=value)


def check_rate_period(period: float, *, what: str = "rate_limit", given: object = None) -> float:
    """`period` (seconds) if it is a whole number of milliseconds within the bounds, else `InvalidLimitError`."""
    shown_value = shown(period if given is None else given)
    if not period > 0:
        raise InvalidLimitError(f"{what} needs a period above 0 seconds, got {shown_value}")
    if not (math.isfinite(period) and MIN_RATE_PERIOD <= period <= MAX_RATE_PERIOD):
        raise InvalidLimitError(
            f"{what} needs a period from {MIN_RATE_PERIOD:g} s (1 ms) to {MAX_RATE_PERIOD:,.0f} s (30 days), "
            f"got {shown_value}"
        )
    millis = round(period * 1000)
    if abs(period * 1000 - millis) > 1e-6:
        raise InvalidLimitError(f"{what} needs a period of whole milliseconds, got {shown_value}")
    return millis / 1000


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidLimitError(f"{what} count must be a whole number, got {shown(value)}")
    return value


def _period(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidLimitError(f"{what} period must be a number of seconds, got {shown(value)}")
    try:
        return float(value)
    except OverflowError:  # an int too large for a float
        return math.inf


def check_max_concurrent(value: object, *, what: str = "max_concurrent") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidLimitError(f"{what} must be a whole number from 1 to {MAX_LIMIT_COUNT:,}, got {shown(value)}")
    if value < 1:
        raise InvalidLimitError(f"{what} must be at least 1 (a limit of {value} would never run a job), got {value}")
    if value > MAX_LIMIT_COUNT:
        raise InvalidLimitError(f"{what} must be at most {MAX_LIMIT_COUNT:,}, got {shown(value)}")
    return value


def check_group_limit(limit: GroupLimit) -> None:
    """`InvalidLimitError` unless every value of `limit` is within the bounds core enforces at
    declaration; a backend that checks the limits it is handed (Redis) calls this, so the two agree."""
    where = f" for {limit.key}"
    if limit.max_concurrent is not None:
        check_max_concurrent(limit.max_concurrent, what="max_concurrent" + where)
    if limit.rate_limit is not None:
        if isinstance(limit.rate_limit, bool) or not isinstance(limit.rate_limit, int):
            raise InvalidLimitError(f"rate_limit{where} count must be a whole number, got {shown(limit.rate_limit)}")
        if limit.rate_limit < 1:
            raise InvalidLimitError(f"rate_limit{where} must allow at least 1 start per period, got {limit.rate_limit}")
        if limit.rate_limit > MAX_LIMIT_COUNT:
            raise InvalidLimitError(
                f"rate_limit{where} must allow at most {MAX_LIMIT_COUNT:,} starts per period, "
                f"got {shown(limit.rate_limit)}"
            )
        check_rate_period(_period(limit.rate_period, "rate_limit" + where), what="rate_limit" + where)


def shown(value: object, width: int = 80) -> str:
    """`repr(value)`, cut to `width` characters (an error message never carries a huge input whole)."""
    try:
        text = repr(value)
    except Exception:  # a repr that fails, or an int too large to print
        return f"<{type(value).__name__}>"
    return text if len(text) <= width else f"{text[: width - 15]}... ({len(text):,} chars)"


def format_rate(count: int, period: float) -> str:
    """``(10, 1.0)`` as ``10/s``, ``(100, 60.0)`` as ``100/m``, ``(10, 5.0)`` as ``10/5s``."""
    for unit, seconds in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if period == seconds:
            return f"{count}/{unit}"
    return f"{count}/{period:g}s"


def describe(limit: GroupLimit) -> str:
    """One line for `soniq inspect` and the dashboard: ``at most 2 running, 10/s, per limit_key``."""
    parts = []
    if limit.max_concurrent is not None:
        parts.append(f"at most {limit.max_concurrent} running")
    if limit.rate_limit is not None:
        parts.append(f"{format_rate(limit.rate_limit, limit.rate_period)} starts")
    if limit.partitioned:
        parts.append("per limit_key")
    return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class JobLimits:
    """A job's own limits, as `@app.job` declared them (checked)."""

    max_concurrent: int | None = None
    rate_limit: int | None = None
    rate_period: float = 1.0
    limit_key: LimitKey | None = None
    """An argument name, or a callable taking the arguments mapping; partitions the limits."""
    defaults: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """The handler's parameter defaults: a `limit_key` argument left out takes the value the handler gets."""

    def key_for(self, job_name: str, args: Mapping[str, Any]) -> str | None:
        """The row's `limit_key` (None when the limits are not partitioned)."""
        if self.limit_key is None:
            return None
        return limit_key_value(job_name, self, args)

    def group_limit(self, job_name: str) -> GroupLimit:
        return GroupLimit(
            scope=LimitScope.JOB,
            name=job_name,
            max_concurrent=self.max_concurrent,
            rate_limit=self.rate_limit,
            rate_period=self.rate_period,
            partitioned=self.limit_key is not None,
        )


def job_limits(
    func: Callable[..., Any],
    *,
    max_concurrent: object,
    rate_limit: object,
    limit_key: object,
    signature: inspect.Signature | None,
    args_model: type[Any] | None,
) -> JobLimits | None:
    """The decorator's limit options checked (None when it declares none); `InvalidLimitError` otherwise."""
    if max_concurrent is None and rate_limit is None:
        if limit_key is not None:
            raise InvalidLimitError(
                "limit_key partitions a limit, but this job declares none: add max_concurrent= or rate_limit="
            )
        return None
    concurrent = check_max_concurrent(max_concurrent) if max_concurrent is not None else None
    count, period = parse_rate_limit(rate_limit) if rate_limit is not None else (None, 1.0)
    if limit_key is not None:
        _check_limit_key(func, limit_key, signature, args_model)
    return JobLimits(
        max_concurrent=concurrent,
        rate_limit=count,
        rate_period=period,
        limit_key=limit_key,  # type: ignore[arg-type]  # checked above: a name or a callable
        defaults=parameter_defaults(signature) if isinstance(limit_key, str) else {},
    )


def _check_limit_key(
    func: Callable[..., Any], key: object, signature: inspect.Signature | None, args_model: type[Any] | None
) -> None:
    if callable(key):
        return
    if not isinstance(key, str) or not key:
        raise InvalidLimitError(f"limit_key must be an argument name or a callable(args) -> str, got {key!r}")
    if args_model is not None and key in getattr(args_model, "model_fields", {}):
        return
    if signature is None:
        return  # a callable without a readable signature: nothing to check it against
    parameters = signature.parameters
    if key in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return
    name = getattr(func, "__qualname__", repr(func))
    raise InvalidLimitError(
        f"limit_key {key!r} names no parameter of {name} (it takes: {', '.join(parameters) or 'no arguments'})"
    )


def limit_key_value(job_name: str, limits: JobLimits, args: Mapping[str, Any]) -> str:
    """The row's `limit_key`: the named argument (or the parameter's default) as text, or what the
    callable returns, as text. A missing argument or a failing callable is `JobOptionsError`."""
    key = limits.limit_key
    if callable(key):
        try:
            value = key(args)
        except Exception as exc:
            raise JobOptionsError(
                f"the limit_key callable of job {job_name!r} raised {type(exc).__name__}: {exc}"
            ) from exc
    else:
        assert isinstance(key, str)
        if key in args:
            value = args[key]
        elif key in limits.defaults:
            value = limits.defaults[key]
        else:
            raise JobOptionsError(
                f"job {job_name!r} is limited per {key!r} (its limit_key), but the call does not pass {key}"
            )
    text = str(value)
    if len(text) > MAX_LIMIT_KEY_LENGTH:
        raise JobOptionsError(
            f"the limit_key of job {job_name!r} is {len(text)} characters, over the limit of {MAX_LIMIT_KEY_LENGTH}"
        )
    return text


def parameter_defaults(signature: inspect.Signature | None) -> dict[str, Any]:
    """Parameters with a default, so that a limit_key argument left out takes the value the handler gets."""
    if signature is None:
        return {}
    return {n: p.default for n, p in signature.parameters.items() if p.default is not inspect.Parameter.empty}


# -- the queue_limits setting ------------------------------------------------------------

_QUEUE_LIMIT_KEYS = ("max_concurrent", "rate_limit")


def queue_group_limits(value: Mapping[Any, Any], *, error: Callable[[str], Exception]) -> tuple[GroupLimit, ...]:
    """``{"queue": {"max_concurrent": N, "rate_limit": "N/s"}}`` as `GroupLimit`s in queue order;
    every problem is raised through `error(message)` (the settings' `SettingsError`)."""
    from soniq.validation import check_queue_name

    limits = []
    for queue, spec in sorted(value.items(), key=lambda item: str(item[0])):
        try:
            check_queue_name(queue, what="a queue_limits key")
        except JobOptionsError as exc:
            raise error(str(exc)) from None
        if not isinstance(spec, Mapping):
            raise error(f'queue {queue!r} must map to an object such as {{"max_concurrent": 5}}, got {spec!r}')
        unknown = [k for k in spec if k not in _QUEUE_LIMIT_KEYS]
        if unknown:
            listed = ", ".join(map(repr, unknown))
            raise error(f"queue {queue!r}: unknown key(s) {listed}; use max_concurrent, rate_limit")
        if all(spec.get(k) is None for k in _QUEUE_LIMIT_KEYS):
            raise error(f"queue {queue!r} declares no limit: give max_concurrent, rate_limit or both")
        concurrent, rate = spec.get("max_concurrent"), spec.get("rate_limit")
        try:
            concurrent = check_max_concurrent(concurrent) if concurrent is not None else None
            count, period = parse_rate_limit(rate) if rate is not None else (None, 1.0)
        except InvalidLimitError as exc:
            raise error(f"queue {queue!r}: {exc}") from None
        limits.append(
            GroupLimit(
                scope=LimitScope.QUEUE, name=queue, max_concurrent=concurrent, rate_limit=count, rate_period=period
            )
        )
    return tuple(limits)


def queue_limits_json(limits: Iterable[GroupLimit]) -> dict[str, dict[str, Any]]:
    """The setting's value back in its JSON shape (for `soniq inspect --json`)."""
    shown: dict[str, dict[str, Any]] = {}
    for limit in limits:
        entry: dict[str, Any] = {}
        if limit.max_concurrent is not None:
            entry["max_concurrent"] = limit.max_concurrent
        if limit.rate_limit is not None:
            entry["rate_limit"] = format_rate(limit.rate_limit, limit.rate_period)
        shown[limit.name] = entry
    return shown


# -- what is running now, per limited group (soniq inspect, the dashboard) ------------------

PROCESSING_SCAN = 1000
"""Running rows `limit_usage` reads at most to count job-scoped groups."""


async def limit_usage(backend: QueueStore, limits: Sequence[GroupLimit]) -> list[dict[str, Any]]:
    """Each limit as JSON-ready data with what is `processing` in its group right now.

    Queue limits are counted exactly from the per-queue counts; job limits from the running rows,
    read up to `PROCESSING_SCAN` of them (``complete`` says whether that was all). A partitioned
    limit lists the running count per `limit_key`. Two reads at most, whatever the number of limits.
    Both are `OperatorReads`: a backend without that role raises `MissingBackendRoleError`.
    """
    from soniq import features
    from soniq.params import JobCountsParams, JobPageParams
    from soniq.records import JobStatus

    reads = features.operator_reads(backend, features.LIMIT_USAGE)

    queues = [limit.name for limit in limits if limit.scope is LimitScope.QUEUE]
    running_in_queue: dict[str, int] = {}
    if queues:
        running_in_queue = {c.queue: c.processing for c in await reads.job_counts(JobCountsParams(queues=queues))}
    by_job: dict[str, dict[str | None, int]] = {}
    complete = True
    if any(limit.scope is LimitScope.JOB for limit in limits):
        page = await reads.job_page(JobPageParams(statuses=[JobStatus.PROCESSING], limit=PROCESSING_SCAN))
        complete = page.next_cursor is None
        for row in page.rows:
            keys = by_job.setdefault(row.job_name, {})
            keys[row.limit_key] = keys.get(row.limit_key, 0) + 1
    shown = []
    for limit in limits:
        entry: dict[str, Any] = {
            "scope": limit.scope.value,
            "name": limit.name,
            "max_concurrent": limit.max_concurrent,
            "rate_limit": format_rate(limit.rate_limit, limit.rate_period) if limit.rate_limit is not None else None,
            "partitioned": limit.partitioned,
            "description": describe(limit),
        }
        if limit.scope is LimitScope.QUEUE:
            entry.update(processing=running_in_queue.get(limit.name, 0), complete=True)
        else:
            keys = by_job.get(limit.name, {})
            entry.update(processing=sum(keys.values()), complete=complete)
            if limit.partitioned:
                ordered = sorted(keys.items(), key=lambda item: (item[0] is None, str(item[0])))
                entry["processing_by_key"] = [{"limit_key": k, "processing": n} for k, n in ordered]
        shown.append(entry)
    return shown
