"""The jobs module the process tests hand to ``soniq worker --jobs-modules``."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from soniq import Soniq

_namespace = os.environ.get("SONIQ_PROM_TEST_NAMESPACE")
app = Soniq(
    os.environ["SONIQ_PROM_TEST_URL"],
    backend_options={"namespace": _namespace} if _namespace else None,
)


@app.job(queue="emails")
async def quick(n: int) -> int:
    return n


@app.job(max_retries=1)
async def flaky() -> None:
    raise RuntimeError("always fails")


@app.job
async def stuck() -> None:
    await asyncio.sleep(3600)


@app.job
def blocking(flag: str) -> None:
    # A sync thread the shutdown cannot cancel: it returns once the test creates `flag`.
    deadline = time.monotonic() + 120
    while not Path(flag).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
