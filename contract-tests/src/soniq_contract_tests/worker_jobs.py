"""Jobs that the process scenarios run inside real ``soniq worker`` processes.

Imported by the child as ``--jobs-modules soniq_contract_tests.worker_jobs``;
the child builds its app from ``SONIQ_CT_URL``, ``SONIQ_CT_NAMESPACE`` and
the JSON ``SONIQ_CT_OPTIONS`` (extra `from_url` keywords; every other
setting comes from the usual ``SONIQ_*`` variables); job names listed in
``SONIQ_CT_WITHOUT`` (comma-separated) are left out, as in a worker still
running an older release of the code (the rolling-deploy scenario). Each
handler appends ``<event> <tag> <pid>`` to the file named by
``SONIQ_CT_RUNLOG`` so a test can wait on what really ran, and where.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Mapping
from typing import Any

from soniq import Soniq


def log_run(event: str, tag: str) -> int:
    """Append one line and return how many `event` lines this tag has now."""
    path = os.environ["SONIQ_CT_RUNLOG"]
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{event} {tag} {os.getpid()}\n")
        handle.flush()
        os.fsync(handle.fileno())
    with open(path, encoding="utf-8") as handle:
        return sum(1 for line in handle if line.split(" ")[:2] == [event, tag])


def backend_options(namespace: str | None, extra: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The `from_url` keywords of a scenario's app: its namespace plus the suite's options."""
    options = {**(extra or {}), **({"namespace": namespace} if namespace else {})}
    return options or None


def build_app(
    url: str,
    namespace: str | None,
    options: Mapping[str, Any] | None = None,
    *,
    without: frozenset[str] = frozenset(),
    **settings: Any,
) -> Soniq:
    app = Soniq(url, backend_options=backend_options(namespace, options), **settings)

    @app.job(name="ct.sleep_async", max_retries=3)
    async def sleep_async(tag: str, seconds: float) -> str:
        log_run("start", tag)
        await asyncio.sleep(seconds)
        log_run("end", tag)
        return "slept"

    @app.job(name="ct.sleep_sync", max_retries=3)
    def sleep_sync(tag: str, seconds: float) -> str:
        log_run("start", tag)
        time.sleep(seconds)
        log_run("end", tag)
        return "slept"

    @app.job(name="ct.block_first_runs", max_retries=0)
    async def block_first_runs(tag: str, blocked_runs: int) -> str:
        """Sleeps forever on its first `blocked_runs` runs; later runs return at once."""
        runs = log_run("start", tag)
        if runs <= blocked_runs:
            await asyncio.sleep(3600)
        log_run("end", tag)
        return f"finished on run {runs}"

    @app.job(name="ct.block_first_runs_with_retries", max_retries=3)
    async def block_first_runs_with_retries(tag: str, blocked_runs: int) -> str:
        return await block_first_runs(tag, blocked_runs)

    @app.job(name="ct.kill_my_worker", max_retries=1)
    def kill_my_worker(tag: str) -> None:
        log_run("start", tag)
        os.kill(os.getpid(), signal.SIGKILL)

    if "ct.new_job" not in without:

        @app.job(name="ct.new_job", max_retries=3)
        async def new_job(tag: str) -> str:
            """Only in the new release of the code."""
            log_run("start", tag)
            log_run("end", tag)
            return "new"

    return app


if os.environ.get("SONIQ_CT_URL"):
    app = build_app(
        os.environ["SONIQ_CT_URL"],
        os.environ.get("SONIQ_CT_NAMESPACE") or None,
        json.loads(os.environ.get("SONIQ_CT_OPTIONS") or "{}"),
        without=frozenset(filter(None, (os.environ.get("SONIQ_CT_WITHOUT") or "").split(","))),
    )
