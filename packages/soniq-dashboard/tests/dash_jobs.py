"""Jobs the real worker process runs in the dashboard tests; the store comes from SONIQ_DATABASE_URL."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from soniq import JobContext, Soniq

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


# What a careless or hostile handler writes into its progress message and its log.
HOSTILE_PROGRESS = "<script>alert('progress')</script> \x1b[31mred\x1b[0m via " + SECRET_URL
HOSTILE_LOG = "<img src=x onerror=\"alert('log')\"> \x1b[1;31mALERT\x1b[0m calling " + SECRET_URL
MULTILINE_LOG = "first line\n  second line, indented\nthird <b>line</b>"


@app.job(name="dash_jobs.report", max_retries=0)
async def report(ctx: JobContext, gate: str, steps: int = 2, filler: int = 0) -> str:
    """Logs `filler` numbered lines and two hostile records; then, for each step i, reports progress
    i of `steps`, logs "step i of N done" and waits for the file ``<gate>.<i>`` (the test's go-ahead)."""
    for n in range(filler):
        ctx.logger.info("filler record %d", n)
    ctx.logger.info(HOSTILE_LOG)
    ctx.logger.warning(MULTILINE_LOG)
    for i in range(1, steps + 1):
        await ctx.progress(i, total=steps, message=f"{HOSTILE_PROGRESS} (step {i})")
        ctx.logger.info("step %d of %d done", i, steps)
        go_ahead = Path(f"{gate}.{i}")
        while not go_ahead.exists():  # noqa: ASYNC110, ASYNC240 - a file is the test's signal
            await asyncio.sleep(0.05)
    return "reported"


@app.job(name="dash_jobs.log_then_fail", max_retries=0)
async def log_then_fail(ctx: JobContext) -> None:
    """Logs a record, then dead-letters: its log moves with it."""
    ctx.logger.error("giving up on %s", SECRET_URL)
    raise RuntimeError("gave up")
