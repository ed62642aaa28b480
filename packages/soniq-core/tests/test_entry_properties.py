"""As properties: every drawn value is refused where it enters, with a `SoniqError`
naming it, or the job runs the same on every backend (memory, SQLite, PostgreSQL, Redis).

Hypothesis draws numbers at and past each bound, NaN and infinities, huge ints, NUL and lone
surrogates. On each backend one app, one namespace and one event loop serve every example;
`max_examples` is small so the module runs in seconds per backend. Real servers, no mocks.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_app_on_every_backend import BACKENDS, backend_url, drop, namespace

from soniq import (
    InvalidLimitError,
    JobArgumentsError,
    JobOptionsError,
    SettingsError,
    Soniq,
    SoniqError,
)
from soniq.limits import MAX_LIMIT_COUNT, MAX_RATE_PERIOD, MIN_RATE_PERIOD
from soniq.settings import Settings
from soniq.validation import (
    MAX_JOB_TIMEOUT,
    MIN_JOB_TIMEOUT,
    check_priority,
    check_queue_name,
    encode_args,
    resolve_scheduled_at,
)

EXAMPLES = settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
RUN_DEADLINE = 30.0

# -- strategies ----------------------------------------------------------------------------

SPECIAL_FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-300, 1e300, -1.0])
HUGE_INTS = st.sampled_from([2**31, 2**53 + 1, 2**63, 10**30, 10**400, -(2**63)])


def around(low: float, high: float) -> st.SearchStrategy[float]:
    """Numbers at, just inside and just past `low` and `high`, and anywhere between."""
    edges = [low, high, low / 2, low * 1.5, high * 1.000001, high - 1, low - 1e-9]
    return st.one_of(st.sampled_from(edges), st.floats(min_value=low, max_value=high), SPECIAL_FLOATS)


GOOD_COUNTS = st.one_of(st.integers(min_value=1, max_value=3), st.sampled_from([MAX_LIMIT_COUNT]))
BAD_COUNTS = st.one_of(st.integers(min_value=-2, max_value=0), st.sampled_from([MAX_LIMIT_COUNT + 1]), HUGE_INTS)
# Periods in whole milliseconds, 1 ms to 30 days, and values past them.
GOOD_PERIODS = st.one_of(
    st.sampled_from([MIN_RATE_PERIOD, MAX_RATE_PERIOD]),
    st.integers(min_value=1, max_value=int(MAX_RATE_PERIOD * 1000)).map(lambda ms: ms / 1000),
)
BAD_PERIODS = st.one_of(around(MIN_RATE_PERIOD, MAX_RATE_PERIOD), HUGE_INTS)
RATE_TUPLES = st.one_of(
    st.tuples(GOOD_COUNTS, GOOD_PERIODS),
    st.tuples(BAD_COUNTS, GOOD_PERIODS),
    st.tuples(GOOD_COUNTS, BAD_PERIODS),
)
RATE_TEXT = st.one_of(
    st.from_regex(r"\A[0-9]{1,22}/[0-9]{0,22}(\.[0-9]{1,4})?[smh]\Z"),
    st.text(max_size=12),
    st.sampled_from(["1/99999999999999999999h", "1/720h", "1/721h", "1/0.001s", "1/0.0001s", "1\x00/s", "1/\ud800s"]),
)
GOOD_RATES = st.one_of(
    st.none(), st.tuples(GOOD_COUNTS, GOOD_PERIODS), st.sampled_from(["1/s", "5/m", "1/720h", "1/0.001s", "2/1.5s"])
)
ANY_RATES = st.one_of(RATE_TUPLES, RATE_TEXT)
GOOD_TIMEOUTS = st.one_of(st.none(), st.floats(min_value=MIN_JOB_TIMEOUT, max_value=MAX_JOB_TIMEOUT))
ANY_TIMEOUTS = st.one_of(around(MIN_JOB_TIMEOUT, MAX_JOB_TIMEOUT), HUGE_INTS, st.sampled_from([True, "5"]))


@st.composite
def job_options(draw: st.DrawFn) -> dict[str, object]:
    """Valid values for every option, or valid ones except one drawn from anything at all."""
    options: dict[str, object] = {
        "rate_limit": draw(GOOD_RATES),
        "max_concurrent": draw(st.one_of(st.none(), GOOD_COUNTS)),
        "timeout": draw(GOOD_TIMEOUTS),
    }
    spoiled = draw(st.sampled_from([None, "rate_limit", "max_concurrent", "timeout"]))
    if spoiled is not None:
        anything = {"rate_limit": ANY_RATES, "max_concurrent": BAD_COUNTS, "timeout": ANY_TIMEOUTS}[spoiled]
        options[spoiled] = draw(anything)
    return options


ODD_TEXT = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["\x00", "a\x00b", "\ud800", "caf\udce9", "\U0001f600", " ", ""]),
    st.builds(lambda a, b: a + b, st.text(max_size=5), st.sampled_from(["\x00", "\udfff", "\u202e"])),
)
VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**53), max_value=2**53),
        st.sampled_from([2**31, 2**53 + 1, 2**63, 10**30, -(2**63), 10**400]),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=10),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6,
)
ODD_VALUES = st.one_of(ODD_TEXT, SPECIAL_FLOATS, st.dictionaries(ODD_TEXT, st.none(), min_size=1, max_size=1))
ARGS = st.one_of(
    st.dictionaries(st.from_regex(r"\A[a-z]{1,8}\Z"), VALUES, max_size=3),
    st.dictionaries(st.from_regex(r"\A[a-z]{1,8}\Z"), VALUES, max_size=3),
    st.dictionaries(st.from_regex(r"\A[a-z]{1,8}\Z"), ODD_VALUES, min_size=1, max_size=2),
)
PRIORITIES = st.one_of(st.none(), st.none(), st.integers(min_value=-(2**31) - 1, max_value=2**31), HUGE_INTS)
QUEUES = st.one_of(st.none(), st.none(), ODD_TEXT, st.sampled_from(["default", "a" * 200, "é" * 100, "é" * 101]))
# Only schedules that are due now or out of range: a job due later would not run within the example.
SCHEDULES = st.one_of(
    st.none(),
    st.none(),
    SPECIAL_FLOATS,
    st.sampled_from([1e12, -1e12, -5.0, 0, 2**63, -(2**63), 10**400, 1e-9]),
)


# -- one app per backend, one event loop for all examples --------------------------------------


class Harness:
    """An app on one backend and namespace, driven from Hypothesis' synchronous examples."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.runner = asyncio.Runner()
        self.app = Soniq(
            backend_url(kind, tmp_path),
            backend_options={"namespace": namespace()},
            observers="",
            heartbeat_interval=0.2,
            heartbeat_timeout=1.0,
            poll_interval=0.05,
            scheduler_enabled=False,
            job_timeout=60,
        )
        self.names = (f"job_{n}" for n in itertools.count())
        self.ran = 0
        """Jobs run to their end: a property whose every example was refused would prove nothing."""
        self.runner.run(self.app.setup())

    def close(self) -> None:
        async def finish() -> None:
            try:
                await drop(self.app)
            finally:
                await self.app.close()

        try:
            self.runner.run(finish())
        finally:
            self.runner.close()

    def register(self, **options: Any) -> str:
        """Register an echo job under a new name; returns the name. It returns the arguments it was
        given as ASCII JSON text, so a NUL or any other character it received is in its result."""
        name = next(self.names)

        async def echo(**kwargs: Any) -> str:
            return echoed(kwargs)

        self.app.job(name=name, max_retries=0, **options)(echo)
        return name

    def run(self, name: str, **enqueue: Any) -> dict[str, Any]:
        """Enqueue one job, run a worker until nothing is due, and return the job's row."""

        async def main() -> dict[str, Any]:
            job_id = await self.app.enqueue(name, **enqueue)
            await asyncio.wait_for(self.app.run_worker(run_once=True, install_signal_handlers=False), RUN_DEADLINE)
            row = await self.app.get_job(job_id)
            assert row is not None, f"job {job_id} vanished on {self.kind}"
            self.ran += 1
            return row

        return self.runner.run(main())

    def enqueue_refused(self, name: str, **enqueue: Any) -> SoniqError:
        async def main() -> SoniqError:
            before = (await self.app.get_queue_stats())["total"]
            try:
                await self.app.enqueue(name, **enqueue)
            except SoniqError as exc:
                assert (await self.app.get_queue_stats())["total"] == before, "a refused enqueue stored a row"
                return exc
            raise AssertionError("accepted")

        return self.runner.run(main())


@pytest.fixture(params=BACKENDS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    made = Harness(str(request.param), tmp_path)
    yield made
    made.close()


def echoed(args: dict[str, Any]) -> str:
    return json.dumps(args, ensure_ascii=True, sort_keys=True)


def refusal(check: Callable[[], object]) -> SoniqError | None:
    """The `SoniqError` core's own check raises for a value, or None when it takes the value."""
    try:
        check()
    except SoniqError as exc:
        return exc
    return None


def names_value(message: str, *options: str) -> bool:
    return any(option in message for option in options)


# -- the properties --------------------------------------------------------------------------


def test_job_options_are_refused_at_decoration_or_the_job_runs(harness: Harness) -> None:
    @EXAMPLES
    @given(options=job_options())
    def check(options: dict[str, Any]) -> None:
        registered: list[str] = []
        error = refusal(lambda: registered.append(harness.register(**options)))
        if error is not None:
            event("refused")
            assert isinstance(error, (InvalidLimitError, JobOptionsError))
            assert names_value(str(error), "rate_limit", "max_concurrent", "timeout"), str(error)
            assert len(str(error)) < 400
            return
        [name] = registered
        event("ran")
        row = harness.run(name, n=1)
        assert (row["status"], row["result"]) == ("done", echoed({"n": 1})), (harness.kind, options, row)

    check()
    assert harness.ran >= 3


def test_enqueue_inputs_are_refused_at_entry_or_the_job_runs_the_same(harness: Harness) -> None:
    name = harness.register()

    @EXAMPLES
    @given(args=ARGS, priority=PRIORITIES, queue=QUEUES, scheduled_at=SCHEDULES)
    def check(args: dict[str, Any], priority: object, queue: object, scheduled_at: object) -> None:
        options = {
            k: v for k, v in (("priority", priority), ("queue", queue), ("scheduled_at", scheduled_at)) if v is not None
        }
        expected = [
            problem
            for problem in (
                refusal(lambda: encode_args(name, args, max_bytes=harness.app.settings.max_args_bytes)),
                refusal(lambda: check_priority(priority)) if priority is not None else None,
                refusal(lambda: check_queue_name(queue)) if queue is not None else None,
                refusal(lambda: resolve_scheduled_at(scheduled_at)) if scheduled_at is not None else None,
            )
            if problem is not None
        ]
        event("refused" if expected else "ran")
        if expected:
            error = harness.enqueue_refused(name, **args, **options)
            # Whichever problem core meets first, named; the same on every backend.
            assert str(error) in [str(problem) for problem in expected], (harness.kind, error, expected)
            assert isinstance(error, (JobArgumentsError, JobOptionsError))
            assert len(str(error)) < 600
            return
        row = harness.run(name, **args, **options)
        assert row["status"] == "done", (harness.kind, args, options, row)
        assert row["result"] == echoed(args), (harness.kind, args, row["result"])
        assert row["args"] == args, (harness.kind, args, row["args"])

    check()
    assert harness.ran >= 3


def test_depends_on_is_refused_at_entry_or_stored(harness: Harness) -> None:
    name = harness.register()

    @EXAMPLES
    @given(count=st.sampled_from([0, 1, 10, 999, 1000, 1001, 5000]), known=st.booleans())
    def check(count: int, known: bool) -> None:
        async def main() -> None:
            ids = [await harness.app.enqueue(name, n=0)] if known and count else []
            ids += [f"missing-{n}" for n in range(count - len(ids))]
            error: SoniqError | None = None
            try:
                await harness.app.enqueue(name, depends_on=ids)
            except SoniqError as exc:
                error = exc
            if error is None:
                assert count == 0 or (known and count == 1)
                return
            assert "depends_on" in str(error), str(error)
            assert len(str(error)) < 600
            assert count > 1000 or not (known and count == 1), str(error)

        harness.runner.run(main())

    check()


NUMERIC_SETTINGS = [
    name
    for name, value in Settings().__dict__.items()
    if isinstance(value, (int, float)) and not isinstance(value, bool)
] + ["job_timeout", "sync_handler_grace_seconds", "dead_letter_retention_days", "result_ttl", "pool_max_size"]


@EXAMPLES
@given(
    name=st.sampled_from(NUMERIC_SETTINGS),
    value=st.one_of(
        SPECIAL_FLOATS,
        HUGE_INTS,
        st.floats(),
        st.integers(),
        st.sampled_from(["nan", "inf", "1e400", "1\x00", "\ud800", "9" * 5000, " 5 "]),
    ),
)
def test_numeric_settings_are_refused_with_their_name_or_taken_finite(name: str, value: object) -> None:
    loaded: list[Settings] = []
    error = refusal(lambda: loaded.append(Settings.load({name: value}, environ={})))
    if error is not None:
        assert isinstance(error, SettingsError)
        assert f"setting '{name}'" in str(error)
        assert len(str(error)) < 400
        return
    taken = getattr(loaded[0], name)
    assert isinstance(taken, (int, float)), (name, value, taken)
    assert math.isfinite(taken), (name, value, taken)
    assert 0 <= taken <= 100 * 365 * 86400, (name, value, taken)
