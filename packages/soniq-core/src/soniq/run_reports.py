"""What one run of a job reports while it runs: `ctx.progress` and `ctx.logger`, made on first use
(a handler that uses neither costs nothing) and written once more when the run ends."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from soniq.job_logs import JobLogBook, JobLogger
from soniq.progress import JobProgress

__all__ = ["DEFAULT_LOG_MAX_BYTES", "FINAL_WRITE_SECONDS", "RunReports"]

logger = logging.getLogger("soniq.worker")

DEFAULT_LOG_MAX_BYTES = 65_536

FINAL_WRITE_SECONDS = 1.0
"""How long the end of a run waits for its last progress and log writes before settling anyway."""


class RunReports:
    """The progress and log of one run; the worker makes one per run and closes it before settling."""

    def __init__(
        self,
        *,
        backend: object | None = None,
        job_id: str = "",
        job_name: str = "",
        worker_id: str = "",
        log_max_bytes: int = DEFAULT_LOG_MAX_BYTES,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        seal_text: Callable[[str], str] | None = None,
    ) -> None:
        self._backend = backend
        self._job_id = job_id
        self._job_name = job_name
        self._worker_id = worker_id
        self._log_max_bytes = log_max_bytes
        self._on_progress = on_progress
        self._seal_text = seal_text
        self._loop: asyncio.AbstractEventLoop | None = None
        if backend is not None:
            self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._progress: JobProgress | None = None
        self._book: JobLogBook | None = None
        self._logger: JobLogger | None = None

    def progress(self) -> JobProgress:
        with self._lock:
            if self._progress is None:
                self._progress = JobProgress(
                    backend=self._backend,
                    job_id=self._job_id,
                    worker_id=self._worker_id,
                    on_stored=self._on_progress,
                    seal_text=self._seal_text,
                )
            return self._progress

    def logger(self) -> JobLogger:
        with self._lock:
            if self._logger is None:
                self._book = JobLogBook(
                    backend=self._backend,
                    job_id=self._job_id,
                    worker_id=self._worker_id,
                    max_bytes=self._log_max_bytes,
                    loop=self._loop,
                )
                self._logger = JobLogger(self._book, job_id=self._job_id, job_name=self._job_name)
            return self._logger

    @property
    def log_records(self) -> list[dict[str, str]]:
        """This run's stored-form records (earlier runs' too once read); empty when nothing was logged."""
        book = self._book
        return book.entries if book is not None else []

    async def close(self) -> None:
        """Write the last progress and log records, waiting at most `FINAL_WRITE_SECONDS`."""
        closing = [part.close() for part in (self._progress, self._book) if part is not None]
        if not closing:
            return
        try:
            async with asyncio.timeout(FINAL_WRITE_SECONDS):
                await asyncio.gather(*closing)
        except TimeoutError:
            logger.warning(
                "job %s: its last progress or log records were not stored within %.0fs",
                self._job_id,
                FINAL_WRITE_SECONDS,
            )
        except Exception:
            logger.warning("job %s: its last progress or log records were not stored", self._job_id, exc_info=True)
