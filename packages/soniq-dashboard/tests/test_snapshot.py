from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from soniq_dashboard.snapshot import Refresher


class Counter:
    """A load that counts its calls and how many run at once; `gate` holds each call until set."""

    def __init__(self) -> None:
        self.calls = 0
        self.running = 0
        self.most_at_once = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self) -> int:
        self.calls += 1
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await self.gate.wait()
            return self.calls
        finally:
            self.running -= 1


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
async def test_the_first_request_waits_then_requests_get_the_snapshot_while_it_refreshes() -> None:
    load = Counter()
    refresher = Refresher(load, interval=0.05)
    try:
        first = await refresher.get()
        assert first.value == 1
        # Later requests answer from the latest snapshot; the task replaces it every interval.
        await until(lambda: load.calls >= 3)
        later = await refresher.get()
        assert later.value >= 2
        assert later.as_of >= first.as_of
        # A slow refresh does not hold requests up, and no second one starts beside it.
        load.gate.clear()
        await until(lambda: load.running == 1)
        held = await asyncio.wait_for(refresher.get(), timeout=1)
        assert held.value >= later.value
        await asyncio.sleep(0.2)
        assert load.running == 1
        load.gate.set()
        assert load.most_at_once == 1
    finally:
        await refresher.close()


@pytest.mark.asyncio
async def test_the_refresh_task_stops_when_nobody_asks() -> None:
    load = Counter()
    refresher = Refresher(load, interval=0.02)
    try:
        await refresher.get()
        await until(lambda: refresher._runner is not None and refresher._runner.done())
        calls = load.calls
        await asyncio.sleep(0.1)
        assert load.calls == calls
        # The next request gets the old snapshot at once and restarts the refreshing.
        stale = await refresher.get()
        assert stale.value == calls
        await until(lambda: load.calls > calls)
    finally:
        await refresher.close()


@pytest.mark.asyncio
async def test_a_failed_first_refresh_fails_the_request_and_the_next_one_retries() -> None:
    attempts = []

    async def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("store down")
        return "ok"

    refresher = Refresher(flaky, interval=10)
    try:
        with pytest.raises(RuntimeError, match="store down"):
            await refresher.get()
        assert (await refresher.get()).value == "ok"
    finally:
        await refresher.close()
