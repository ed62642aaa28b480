"""A failed enqueue's span keeps the store's error text (which quotes arguments) out of tracing."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.trace import StatusCode
from otel_testing import Tracing

from soniq import BackendUnavailableError, Soniq
from soniq_otel import attributes as a

pytestmark = pytest.mark.asyncio

SECRET = "card-4111-1111-1111-1111"


class DriverDataError(Exception):
    """Shaped like asyncpg's DataError: the message quotes the query argument."""


async def _fail_enqueue_with(app: Soniq, error: BaseException) -> None:
    @app.job(name="charge")
    async def charge(card: str) -> None:
        return None

    await app.connect()
    backend: Any = app.backend
    original = backend.enqueue_jobs

    async def broken(params: Any, /) -> None:
        raise error

    backend.enqueue_jobs = broken
    try:
        with pytest.raises(type(error)):
            await app.enqueue("charge", card=SECRET)
    finally:
        backend.enqueue_jobs = original


def _all_text(tracing: Tracing) -> str:
    send = tracing.one("send default")
    parts = [send.status.description or ""]
    for event in send.events:
        parts.extend(str(value) for value in (event.attributes or {}).values())
    parts.extend(str(value) for value in (send.attributes or {}).values())
    return "\n".join(parts)


async def test_a_driver_message_with_parameter_values_never_reaches_the_span(tracing: Tracing, app: Soniq) -> None:
    await _fail_enqueue_with(app, DriverDataError(f'invalid input for query argument $3: \'{{"card": "{SECRET}"}}\''))
    send = tracing.one("send default")
    assert send.status.status_code is StatusCode.ERROR
    assert (send.attributes or {})[a.ERROR_TYPE].endswith("DriverDataError")
    [event] = send.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.type"].endswith("DriverDataError")
    text = _all_text(tracing)
    assert SECRET not in text
    assert "query argument" not in text


async def test_soniq_s_own_message_is_kept_with_the_password_masked(tracing: Tracing, app: Soniq) -> None:
    await _fail_enqueue_with(app, BackendUnavailableError("cannot reach postgresql://app:S3cret@db.internal/jobs"))
    text = _all_text(tracing)
    assert "S3cret" not in text
    assert "cannot reach postgresql://app:***@db.internal/jobs" in text
