"""The generic backend contract suite, in its class form, against a file per test."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from soniq.backend import Backend
from soniq_contract_tests.harness import BackendFactory, UrlBackendFactory
from soniq_contract_tests.suite import BackendContractSuite, CorruptRowWriter
from soniq_sqlite import SQLiteBackend


async def write_raw_args(backend: Backend, job_id: str, raw_args: str) -> None:
    """Overwrite a row's stored args with any text, from outside Soniq (SQLite stores it verbatim)."""
    assert isinstance(backend, SQLiteBackend)
    path = backend.location.path
    assert path is not None, "an in-memory database cannot be reached from another connection"

    def write() -> int:
        with sqlite3.connect(path, timeout=10, isolation_level=None) as conn:
            return conn.execute("UPDATE soniq_jobs SET args = ? WHERE id = ?", (raw_args, job_id)).rowcount

    assert await asyncio.to_thread(write) == 1, f"no row {job_id}"


class TestSQLiteBackendContract(BackendContractSuite):
    @pytest.fixture
    def soniq_backend_factory(self, tmp_path: Path) -> BackendFactory:
        # The URL form's factory pickles, which the suite's multi-process claim test needs.
        return UrlBackendFactory(f"sqlite:///{tmp_path}/contract.db")

    @pytest.fixture
    def soniq_corrupt_row(self) -> CorruptRowWriter:
        return write_raw_args
