"""Hostile values on the app's read and by-id API, through `Soniq(backend=...)`.

The rule, the same on every backend: an id or schedule name no store can hold (NUL, a lone
surrogate, an absurd length) is simply not found, exactly as an unknown one (None, False,
`JobNotFoundError`, `DeadLetterNotFoundError`); a filter value enqueue would refuse, or a `limit`
or `offset` outside its bounds, is a `JobOptionsError` naming the argument. Core decides, so no
driver error (asyncpg's, sqlite3's, a Redis script's) ever reaches the caller.

Hypothesis draws the values (NUL, lone surrogates, long and ordinary text, huge and odd numbers);
the values known to have broken a store are always among them. The drawing runs first, then every
value is tried on the backend under test, so each failure message names the value.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soniq import DeadLetterFilter, Soniq
from soniq.backend import Backend
from soniq.backend.bounds import MAX_FILTER_LIMIT, MAX_OFFSET, MAX_PAGE_LIMIT, check_queue_name, storable_text
from soniq.errors import DeadLetterNotFoundError, JobNotFoundError, JobOptionsError, SoniqError
from soniq_contract_tests.harness import ContractHarness

EXAMPLES = 12
"""Values Hypothesis draws per strategy on top of the fixed ones: enough variety, a few seconds a backend."""

FIXED_TEXT = ["\x00", "a\x00b", "\ud800", "job-\udfff", "\udcff", "x" * 256, "y" * 100_000, "", " ", "ordinary"]
"""Text that broke a store before reads checked it (PostgreSQL refuses NUL and lone surrogates, SQLite's driver
cannot encode a surrogate), text past the id length, and plain text."""

FIXED_NUMBERS: list[object] = [0, -1, 1, MAX_PAGE_LIMIT, MAX_PAGE_LIMIT + 1, 2**31, 2**63, -(2**63), 10**400]
ODD_NUMBERS: list[object] = [1.5, "10", None, True, float("nan")]


def _draw(build: Callable[[Any], Any], fixed: list[Any]) -> list[Any]:
    """The fixed values, then `EXAMPLES` values drawn by the strategy `build(strategies)` returns."""
    drawn: list[Any] = list(fixed)

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(value=build(st))
    def collect(value: Any) -> None:
        drawn.append(value)

    collect()
    return drawn


def _texts(st: Any) -> Any:
    """NUL and lone surrogates anywhere in short text, long text, and ordinary text."""
    surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
    return st.one_of(
        st.tuples(st.text(max_size=8), st.sampled_from(["\x00", "\ud800", "\udfff"]), st.text(max_size=8)).map("".join),
        st.text(alphabet=surrogates, min_size=1, max_size=4),
        st.text(min_size=1, max_size=40),
        st.integers(min_value=200, max_value=5000).map(lambda n: "q" * n),
        st.uuids().map(str),
    )


def _numbers(st: Any) -> Any:
    return st.one_of(
        st.integers(min_value=-5, max_value=MAX_PAGE_LIMIT + 5),
        st.integers(),
        st.sampled_from([*FIXED_NUMBERS, *ODD_NUMBERS]),
    )


@contextlib.asynccontextmanager
async def _app(backend: Backend) -> AsyncIterator[Soniq]:
    """An app on the suite's backend (the harness closes and drops the backend itself)."""
    app = Soniq(backend=backend, observers="")
    await app.connect()
    yield app


async def _refusal(call: Callable[[], Awaitable[object]]) -> tuple[object, SoniqError | None]:
    """What the call returned, or the `SoniqError` it raised; any other error fails the test."""
    try:
        return await call(), None
    except SoniqError as exc:
        return None, exc


Read = tuple[str, Callable[[], Awaitable[object]]]
"""A read, and the argument name its refusal must start with."""


def _queue_reads(app: Soniq, queue: Any) -> list[Read]:
    return [
        ("queue", lambda: app.list_jobs(queue=queue)),
        ("queue", lambda: app.get_queue_stats(queue=queue)),
        ("queue", lambda: app.dead_letter.list(queue)),
        ("DeadLetterFilter.queues", lambda: app.dead_letter.stats(DeadLetterFilter(queues=[queue]))),
    ]


def _paged_reads(app: Soniq, number: Any) -> list[Read]:
    return [
        ("limit", lambda: app.list_jobs(limit=number)),
        ("offset", lambda: app.list_jobs(offset=number)),
        ("limit", lambda: app.dead_letter.list(limit=number)),
        ("offset", lambda: app.dead_letter.list(offset=number)),
        ("DeadLetterFilter.limit", lambda: app.dead_letter.list(filter=DeadLetterFilter(limit=number))),
        ("DeadLetterFilter.offset", lambda: app.dead_letter.list(filter=DeadLetterFilter(offset=number))),
    ]


def _text_filter(field: str, value: Any) -> DeadLetterFilter:
    return DeadLetterFilter(job_names=[value]) if field == "job_names" else DeadLetterFilter(reasons=[value])


async def _filtered_stats(app: Soniq, field: str, value: Any) -> object:
    return await app.dead_letter.stats(_text_filter(field, value))


def _empty(answer: object) -> bool:
    """An empty listing, or counts of nothing."""
    return answer == [] or (isinstance(answer, dict) and answer.get("total") == 0)


def _queue_refused(value: object) -> bool:
    try:
        check_queue_name(value)
    except JobOptionsError:
        return True
    return False


class ReadBoundsContract:
    async def test_an_id_no_store_can_hold_is_not_found_by_every_by_id_call(self, contract: ContractHarness) -> None:
        ids = _draw(_texts, FIXED_TEXT)
        async with contract.backend() as backend, _app(backend) as app:

            @app.job(name="contract.read_bounds")
            async def real(n: int) -> int:
                return n

            real_id = await app.enqueue(real, n=1)
            for job_id in ids:
                shown = repr(job_id)[:60]
                assert await app.get_job(job_id) is None, shown
                assert await app.get_result(job_id) is None, shown
                assert await app.cancel_job(job_id) is False, shown
                assert await app.delete_job(job_id) is False, shown
                assert await app.dead_letter.get(job_id) is None, shown
                assert await app.dead_letter.purge(job_id) is False, shown
                with pytest.raises(JobNotFoundError):
                    await app.cancel(job_id)
                with pytest.raises(JobNotFoundError):
                    await app.wait_for(job_id, timeout=0)
                with pytest.raises(DeadLetterNotFoundError):
                    await app.dead_letter.replay(job_id)
            found = await app.get_job(real_id)
            assert found is not None, "a real job must still be found"
            assert found["status"] == "queued"

    async def test_a_schedule_name_no_store_can_hold_is_not_found(self, contract: ContractHarness) -> None:
        names = _draw(_texts, FIXED_TEXT)
        async with contract.backend() as backend, _app(backend) as app:
            scheduler = app.scheduler
            for name in names:
                shown = repr(name)[:60]
                assert await scheduler.get(name) is None, shown
                assert await scheduler.pause(name) is False, shown
                assert await scheduler.resume(name) is False, shown
                assert await scheduler.remove(name) is False, shown

    async def test_a_queue_filter_enqueue_would_refuse_is_refused_by_name(self, contract: ContractHarness) -> None:
        queues = _draw(_texts, FIXED_TEXT)
        async with contract.backend() as backend, _app(backend) as app:
            for queue in queues:
                shown = repr(queue)[:60]
                for argument, call in _queue_reads(app, queue):
                    answer, error = await _refusal(call)
                    if _queue_refused(queue):
                        assert isinstance(error, JobOptionsError), (shown, answer, error)
                        assert str(error).startswith(argument), (shown, str(error)[:200])
                    else:
                        assert error is None, (shown, error)
                        assert _empty(answer), (shown, answer)

    async def test_a_job_name_or_reason_filter_no_store_can_hold_is_refused_by_name(
        self, contract: ContractHarness
    ) -> None:
        values = _draw(_texts, FIXED_TEXT)
        async with contract.backend() as backend, _app(backend) as app:
            for value in values:
                shown = repr(value)[:60]
                for field in ("job_names", "reasons"):
                    answer, error = await _refusal(functools.partial(_filtered_stats, app, field, value))
                    if not storable_text(value):
                        assert isinstance(error, JobOptionsError), (shown, answer, error)
                        assert str(error).startswith(f"DeadLetterFilter.{field}"), (shown, str(error)[:200])
                        continue
                    assert error is None, f"{field}={shown} was refused: {error}"
                    assert _empty(answer), (shown, answer)
                    assert await app.dead_letter.list(filter=_text_filter(field, value)) == [], shown

    async def test_a_limit_or_offset_out_of_bounds_is_refused_by_name(self, contract: ContractHarness) -> None:
        numbers = _draw(_numbers, [*FIXED_NUMBERS, *ODD_NUMBERS])
        async with contract.backend() as backend, _app(backend) as app:
            for number in numbers:
                whole = isinstance(number, int) and not isinstance(number, bool)
                bounded = {
                    "limit": whole and 1 <= number <= MAX_PAGE_LIMIT,
                    "offset": whole and 0 <= number <= MAX_OFFSET,
                    "DeadLetterFilter.limit": whole and 1 <= number <= MAX_FILTER_LIMIT,
                    "DeadLetterFilter.offset": whole and 0 <= number <= MAX_OFFSET,
                }
                for argument, call in _paged_reads(app, number):
                    answer, error = await _refusal(call)
                    shown = f"{argument}={repr(number)[:40]}"
                    if bounded[argument]:
                        assert error is None, (shown, error)
                        assert answer == [], (shown, answer)
                    else:
                        assert isinstance(error, JobOptionsError), (shown, answer, error)
                        assert str(error).startswith(f"{argument} must be a whole number"), (shown, str(error))
