"""The jobs that chaos runs execute inside real ``soniq worker`` processes.

Imported by the child as ``--jobs-modules soniq_contract_tests.chaos.jobs``;
the child builds its app from ``SONIQ_CHAOS_URL`` and ``SONIQ_CHAOS_NAMESPACE``
(every other setting comes from the usual ``SONIQ_*`` variables). Each run
appends ``S <key> <pid> <time>`` when the handler starts and
``E <key> <pid> <time> ok|fail`` just before it returns or raises, fsync'd,
to the file named by ``SONIQ_CHAOS_RUNLOG``. A start with no end from the
same process is a run that was interrupted (killed, or cancelled by the
shutdown force path); the verdict in `soniq_contract_tests.chaos.driver` reads that
log to count runs per job and to explain every extra one.

A job's fate is in its arguments, so the verdict knows what each handler
dictates: ``ok`` returns, ``fail`` raises on every run (dead letter after
`MAX_RETRIES` + 1 counted runs), ``flaky`` raises on its first run to reach
the end and returns on the next.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from soniq import Soniq

MAX_RETRIES = 4
FATES = ("ok", "fail", "flaky")
POISON_TIMEOUT = 0.5
"""The deadline of every hung poisoned job (see `soniq_contract_tests.chaos.poisoned`)."""
POISON_RETRIES = 1
RELEASE_FILE = "release-hung-sync"
"""Created in the run log's directory once a poisoned run has its verdict: the hung sync threads return."""


class ChaosJobError(RuntimeError):
    """The failure a chaos job raises on purpose."""


def log_line(*fields: str) -> None:
    line = " ".join(fields) + "\n"
    fd = os.open(os.environ["SONIQ_CHAOS_RUNLOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        # One write(2) of a short line to an O_APPEND file: lines from many processes never interleave.
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _first_to_claim(key: str) -> bool:
    """True exactly once per key across every process: the flaky run that fails."""
    marker = os.path.join(os.path.dirname(os.environ["SONIQ_CHAOS_RUNLOG"]), "flaky", key)
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _finish(key: str, fate: str) -> dict[str, Any]:
    fails = fate == "fail" or (fate == "flaky" and _first_to_claim(key))
    log_line("E", key, str(os.getpid()), f"{time.time():.6f}", "fail" if fails else "ok")
    if fails:
        raise ChaosJobError(f"chaos failure of {key} ({fate})")
    return {"key": key}


def build_app(url: str, namespace: str | None, **settings: Any) -> Soniq:
    options = {"namespace": namespace} if namespace else None
    app = Soniq(url, backend_options=options, **settings)

    @app.job(name="chaos.async", max_retries=MAX_RETRIES)
    async def chaos_async(key: str, seconds: float, fate: str) -> dict[str, Any]:
        log_line("S", key, str(os.getpid()), f"{time.time():.6f}")
        await asyncio.sleep(seconds)
        return _finish(key, fate)

    @app.job(name="chaos.sync", max_retries=MAX_RETRIES)
    def chaos_sync(key: str, seconds: float, fate: str) -> dict[str, Any]:
        log_line("S", key, str(os.getpid()), f"{time.time():.6f}")
        time.sleep(seconds)
        return _finish(key, fate)

    @app.job(name="chaos.exit", max_retries=0)
    def chaos_exit(kind: str) -> None:
        exc: type[BaseException] = {"SystemExit": SystemExit, "KeyboardInterrupt": KeyboardInterrupt}.get(
            kind, BaseException
        )
        raise exc(f"{kind} raised by a chaos handler")

    @app.job(name="chaos.exit_async", max_retries=0)
    async def chaos_exit_async(kind: str) -> None:
        chaos_exit(kind)

    @app.job(name="chaos.unserialisable", max_retries=0)
    async def chaos_unserialisable() -> object:
        return {"a set": {1, 2}}

    # The poisoned run's jobs: each must end in the dead-letter table without holding anything else up.
    @app.job(name="poison.hang_async", max_retries=POISON_RETRIES, timeout=POISON_TIMEOUT)
    async def poison_hang_async(key: str) -> None:
        await asyncio.Event().wait()

    @app.job(name="poison.swallow_cancel", max_retries=POISON_RETRIES, timeout=POISON_TIMEOUT)
    async def poison_swallow_cancel(key: str) -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue  # the bug under test: a handler that never lets itself be cancelled

    @app.job(name="poison.hang_sync", max_retries=POISON_RETRIES, timeout=POISON_TIMEOUT)
    def poison_hang_sync(key: str) -> None:
        # Never returns while the run is judged; released afterwards so the worker can exit (a thread
        # cannot be stopped from outside, and the shutdown contract waits for every one).
        release = os.path.join(os.path.dirname(os.environ["SONIQ_CHAOS_RUNLOG"]), RELEASE_FILE)
        while not os.path.exists(release):
            time.sleep(0.05)

    @app.job(name="poison.surrogate_result", max_retries=0)
    async def poison_surrogate_result(key: str) -> dict[str, str]:
        return {"file": "report-\udcff.txt"}  # what os.listdir() gives for an undecodable file name

    return app


if os.environ.get("SONIQ_CHAOS_URL"):
    app = build_app(os.environ["SONIQ_CHAOS_URL"], os.environ.get("SONIQ_CHAOS_NAMESPACE") or None)


async def stored_job(app: Soniq, job_id: str) -> dict[str, Any] | None:
    """The job's row in the jobs table only: `app.get_job` also answers for a dead-lettered job,
    and the verdict must tell a job row from a dead-letter row."""
    from soniq.backend import GetJobParams

    backend = await app.connected_backend()
    row = await backend.get_job(GetJobParams(job_id=job_id))
    return row.to_dict() if row is not None else None
