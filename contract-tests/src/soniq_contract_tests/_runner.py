"""Runs one coroutine test on its own event loop, with a deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

TEST_DEADLINE_SECONDS = 120.0
"""A test still running after this long has hung (a lost wake-up, a lock never released)."""


def run_coroutine_test(test_function: Callable[..., Any], arguments: dict[str, Any]) -> None:
    async def run() -> None:
        coroutine: Coroutine[Any, Any, Any] = test_function(**arguments)
        try:
            async with asyncio.timeout(TEST_DEADLINE_SECONDS):
                await coroutine
        except TimeoutError:
            raise AssertionError(
                f"the contract test did not finish within {TEST_DEADLINE_SECONDS:g}s (a backend operation hung)"
            ) from None

    with asyncio.Runner() as runner:
        runner.run(run())
