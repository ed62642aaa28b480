"""What soniq-sqlite lends the contract suite (entry-point group ``soniq_contract_tests.fixtures``).

The suite reads `backend_class` and `corrupt_row` from this module; it imports nothing from the
suite. SQLite has no caller's transaction to join (`transactional_enqueue` is False), so there is
no ``transaction``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3

from soniq_sqlite.backend import SQLiteBackend

backend_class = SQLiteBackend


async def corrupt_row(backend: SQLiteBackend, job_id: str, raw_args: str) -> None:
    """Overwrite the stored args of a queued row with `raw_args`, from a second connection to the file.

    SQLite keeps any text in the column, so the row holds exactly `raw_args`."""
    path = backend.location.path
    if path is None:
        raise AssertionError("an in-memory SQLite database cannot be reached from a second connection")

    def update() -> int:
        with contextlib.closing(sqlite3.connect(path, timeout=10, isolation_level=None)) as connection:
            return connection.execute("UPDATE soniq_jobs SET args = ? WHERE id = ?", (raw_args, job_id)).rowcount

    if await asyncio.to_thread(update) != 1:
        raise AssertionError(f"no soniq_jobs row {job_id} in {path}")
