"""Opening connections, and turning driver faults into `BackendUnavailableError`.

Only faults that mean "the server is gone or refuses us" are translated;
SQL errors (constraint violations, syntax) pass through unchanged so that a
bug is never disguised as an outage.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from soniq.backend import redact_text
from soniq.errors import BackendUnavailableError
from soniq_postgres.options import PostgresOptions

START_HINT = (
    "is the server running and listening there? Start it the way it was installed, e.g. "
    "systemctl start postgresql, brew services start postgresql, docker start <container>, "
    "pg_ctl -D <data directory> start, or on Debian/Ubuntu pg_ctlcluster --skip-systemctl-redirect <version> main start"
)
"""The unreachable-server hint: general first, the Debian command one example among several."""


_LOST = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.TooManyConnectionsError,
)


def is_connection_fault(exc: BaseException) -> bool:
    if isinstance(exc, asyncpg.exceptions.ProtocolViolationError):
        return False  # class 08 by SQLSTATE, but a malformed message is a bug, not an outage
    if isinstance(exc, _LOST):
        return True
    # A server-side termination that arrives while the connection is idle can
    # leave asyncpg's protocol state machine stuck; the connection is unusable.
    if isinstance(exc, asyncpg.exceptions.InternalClientError):
        return True
    # asyncpg raises a bare InterfaceError for a connection closed under it.
    return isinstance(exc, asyncpg.InterfaceError) and "closed" in str(exc).lower()


def connect_error(options: PostgresOptions, exc: BaseException) -> BackendUnavailableError:
    """A one-line error for a failed connection attempt."""
    where = f"PostgreSQL at {options.address}"
    if isinstance(exc, asyncpg.InvalidPasswordError):
        reason = f"password authentication failed for user '{options.user}'; check the password in the URL"
    elif isinstance(exc, asyncpg.InvalidAuthorizationSpecificationError):
        reason = f"the server refused user '{options.user}': {exc}"
    elif isinstance(exc, asyncpg.InvalidCatalogNameError):
        reason = f"database '{options.database}' does not exist; create it or fix the URL's path"
    elif isinstance(exc, asyncpg.exceptions.TooManyConnectionsError):
        reason = f"the server has no free connections ({exc}); raise max_connections or lower pool_max_size"
    elif isinstance(exc, asyncio.TimeoutError):
        reason = f"no answer within {options.connect_timeout:g}s (raise ?connect_timeout=, or check the network)"
    elif isinstance(exc, OSError):
        reason = f"unreachable ({exc.strerror or exc}); {START_HINT}"
    else:
        reason = f"{type(exc).__name__}: {exc}"
    return BackendUnavailableError(redact_text(f"cannot connect to {where}: {reason}"))


def lost_error(options: PostgresOptions, exc: BaseException) -> BackendUnavailableError:
    return BackendUnavailableError(
        redact_text(
            f"lost the connection to PostgreSQL at {options.address} ({type(exc).__name__}: {exc}); "
            "the next call reconnects"
        )
    )


async def _keep_session(connection: Any) -> None:
    """Pool reset hook that sends nothing.

    asyncpg's default reset costs one round trip per release (unlisten, reset
    settings, unlock advisory locks). Pool connections never change session
    state: locks are transaction-scoped and LISTEN has its own connection.
    Open transactions are still rolled back by asyncpg before this runs.
    """


async def open_pool(options: PostgresOptions, *, max_size: int | None = None) -> asyncpg.Pool:
    size = max_size or options.max_size
    try:
        pool = await asyncpg.create_pool(
            options.dsn,
            min_size=min(options.min_size, size),
            max_size=size,
            timeout=options.connect_timeout,
            statement_cache_size=options.statement_cache_size,
            server_settings={"application_name": options.application_name},
            reset=_keep_session,
        )
    except Exception as exc:
        if isinstance(exc, asyncpg.PostgresError | OSError | asyncio.TimeoutError):
            raise connect_error(options, exc) from exc
        raise
    assert pool is not None
    return pool


async def open_connection(
    options: PostgresOptions, *, application_name: str, dsn: str | None = None
) -> asyncpg.Connection:
    """One connection outside the pool; `dsn` (the listener's `listen_url`) overrides the URL."""
    try:
        return await asyncpg.connect(
            dsn or options.dsn,
            timeout=options.connect_timeout,
            statement_cache_size=options.statement_cache_size,
            server_settings={"application_name": application_name},
        )
    except Exception as exc:
        if isinstance(exc, asyncpg.PostgresError | OSError | asyncio.TimeoutError):
            raise connect_error(options, exc) from exc
        raise


@asynccontextmanager
async def translated(options: PostgresOptions) -> AsyncIterator[None]:
    """Re-raise a lost connection inside the block as `BackendUnavailableError`."""
    try:
        yield
    except BackendUnavailableError:
        raise
    except Exception as exc:
        if is_connection_fault(exc):
            raise lost_error(options, exc) from exc
        raise
