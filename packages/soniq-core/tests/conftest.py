from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

import pytest

# Core's own tests never load installed observers (soniq-otel) unless a test asks for them.
os.environ.setdefault("SONIQ_OBSERVERS", "")


async def _wait_until(condition: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.01) -> Any:
    """Poll `condition` (sync or async) until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


@pytest.fixture
def fast_settings() -> dict[str, Any]:
    return {
        "heartbeat_interval": 0.2,
        "heartbeat_timeout": 1.0,
        "poll_interval": 0.05,
        "retry_backoff_base": 0.01,
        "retry_backoff_max": 0.02,
        "observers": "",
    }


@pytest.fixture
def wait_until() -> Callable[..., Any]:
    return _wait_until
