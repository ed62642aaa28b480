"""Jobs the real worker process runs in the dashboard tests; the store comes from SONIQ_DATABASE_URL."""

from __future__ import annotations

import asyncio
from pathlib import Path

from soniq import Soniq

app = Soniq()

EVIL_NAME = "<script>alert('name')</script>"
EVIL_ERROR = "<img src=x onerror=\"alert('error')\"><script>alert('error')</script>"


@app.job(name="dash_jobs.quick")
async def quick(n: int = 0) -> int:
    return n * 2


@app.job(name="dash_jobs.flaky", max_retries=0)
async def flaky(flag: str) -> str:
    """Fails until the test creates `flag`, so the first run dead-letters and a replay succeeds."""
    if not Path(flag).exists():
        raise RuntimeError(f"flag {flag} is not there yet")
    return "recovered"


@app.job(name="dash_jobs.hold")
async def hold(marker: str) -> None:
    Path(marker).touch()
    await asyncio.Event().wait()


@app.job(name=EVIL_NAME, max_retries=0)
async def evil() -> None:
    raise RuntimeError(EVIL_ERROR)
