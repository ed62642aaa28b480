"""Jobs the real worker process runs in the dashboard tests; the store comes from SONIQ_DATABASE_URL."""

from __future__ import annotations

import asyncio
import os
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
    if not os.path.exists(flag):  # noqa: ASYNC240 - a one-off stat in a test job
        raise RuntimeError(f"flag {flag} is not there yet")
    return "recovered"


@app.job(name="dash_jobs.hold")
async def hold(marker: str) -> None:
    Path(marker).touch()  # noqa: ASYNC240 - a one-off touch in a test job
    await asyncio.Event().wait()


@app.job(name="dash_jobs.login", max_retries=0)
async def login(user: str, password: str, note: str = "") -> None:
    raise PermissionError(f"{user} may not log in")


@app.job(name=EVIL_NAME, max_retries=0)
async def evil() -> None:
    raise RuntimeError(EVIL_ERROR)


@app.job(name="dash_jobs.retry_later", max_retries=3, retry_delay=3600)
async def retry_later() -> None:
    """Fails once and is queued again an hour later: a job queued after a failure."""
    raise RuntimeError("the first run failed")


@app.job(name="dash_jobs.second_run", max_retries=2, retry_delay=0)
async def second_run(marker: str) -> str:
    """Fails on its first run (leaving `marker`) and succeeds on its second."""
    if not os.path.exists(marker):  # noqa: ASYNC240 - a one-off stat in a test job
        Path(marker).touch()  # noqa: ASYNC240 - a one-off touch in a test job
        raise RuntimeError("the first run failed")
    return "second time lucky"


@app.job(name="dash_jobs.always_fails", max_retries=1, retry_delay=0)
async def always_fails() -> None:
    raise ValueError("it <always> fails")


SECRET_URL = "https://bot:hunter2-pw@pay.example/callback"
SECRET_CARD = "4111111111111111"
SECRET_TOKEN = "tok-5ecr3t-0000"


@app.job(name="dash_jobs.charge", max_retries=0)
async def charge(card: str, callback: str, api_key: str, amount: int) -> None:
    """Dead-letters with its callback URL (and its password) in the error, as a careless job would."""
    raise ConnectionError(f"could not reach {callback}")


@app.job(name="dash_jobs.mint")
async def mint(user: str) -> dict[str, str]:
    """Succeeds with a token and a URL holding a password in its result."""
    return {"user": user, "token": SECRET_TOKEN, "next": SECRET_URL}
