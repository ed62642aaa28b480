"""What soniq-postgres lends the contract suite (entry-point group ``soniq_contract_tests.fixtures``).

The suite reads `backend_class`, `corrupt_row` and `transaction` from this module; it imports
nothing from the suite. Both open a connection of their own to the backend's database, as an
application or an operator would, outside the backend's pool.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg

from soniq_postgres.backend import PostgresBackend
from soniq_postgres.options import quote_ident
from soniq_postgres.rows import to_json

backend_class = PostgresBackend

APPLICATION_NAME = "soniq-contract-tests"


async def _connect(backend: PostgresBackend) -> asyncpg.Connection:
    # No statement cache: behind PgBouncer in transaction mode, named prepared statements outlive
    # the transaction on a shared server connection and collide with the next client's.
    return await asyncpg.connect(
        backend.options.dsn,
        statement_cache_size=0,
        timeout=backend.options.connect_timeout,
        server_settings={"application_name": APPLICATION_NAME},
    )


async def corrupt_row(backend: PostgresBackend, job_id: str, raw_args: str) -> None:
    """Overwrite the stored args of a queued row with `raw_args`.

    The column is `json`, so the server refuses text that is not JSON (or nests past its stack
    limit); then the closest the store allows is kept: that text as a JSON string, which is still
    not an object."""
    table = f"{quote_ident(backend.options.schema)}.soniq_jobs"
    update = f"UPDATE {table} SET args = $1::json WHERE id = $2"
    connection = await _connect(backend)
    try:
        try:
            status = await connection.execute(update, raw_args, job_id)
        except asyncpg.PostgresError:
            status = await connection.execute(update, to_json(raw_args), job_id)
    finally:
        await connection.close()
    if status != "UPDATE 1":
        raise AssertionError(f"no soniq_jobs row {job_id} in schema {backend.options.schema!r}")


@contextlib.asynccontextmanager
async def transaction(backend: PostgresBackend) -> AsyncIterator[asyncpg.Connection]:
    """The application's side of transactional enqueue: its own connection, its own transaction."""
    connection = await _connect(backend)
    try:
        async with connection.transaction():
            yield connection
    finally:
        await connection.close()
