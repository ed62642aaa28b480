"""Connection poolers in front of PostgreSQL (PgBouncer), found at connect time.

A pooler in transaction mode hands each transaction whatever server
connection is free, so anything tied to a session breaks: LISTEN,
session-level advisory locks and named prepared statements. Soniq's queries
never hold session state (its locks are transaction-scoped), so behind such a
pooler the backend only turns off asyncpg's statement cache and takes its
wake-ups from a direct `listen_url` connection, or polls.

Detection (``pooling=auto``): a server that reports a port other than the
one we dialled is behind a proxy. A few client connections then ask for their
server's pid; when an idle client's server connection is handed to another
client, the proxy pools transactions. A proxy that does not share, yet
answers for a database named ``pgbouncer`` (its admin console; PostgreSQL has
none), is PgBouncer in session mode, which is refused: every pooled Soniq
connection would pin a server connection, and the pooler's limit would stall
workers instead of capping them. Anything else (a port forward) is direct.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from soniq.errors import SoniqError
from soniq_postgres.connection import connect_error
from soniq_postgres.options import PostgresOptions


class PoolerModeError(SoniqError):
    """The pooler in front of PostgreSQL runs in a mode Soniq cannot work through."""


@dataclass(frozen=True, slots=True)
class Detected:
    """What the probe found."""

    transaction_pooling: bool
    proxied: bool
    how: str
    """One phrase for the worker-start line: how we know."""


async def _server_pid(connection: asyncpg.Connection) -> int:
    return int(await connection.fetchval("SELECT pg_backend_pid()"))


async def detect(connect: Any, *, dialled_port: int, console_dsn: str, database: str, address: str) -> Detected:
    """Probe what answers at the URL; raise `PoolerModeError` for session pooling.

    `connect` opens one connection with the statement cache off (safe through any pooler).
    """
    first = await connect()
    try:
        port = await first.fetchval("SELECT inet_server_port()")
        if port is not None and int(port) == dialled_port:
            return Detected(transaction_pooling=False, proxied=False, how="the server answers on the dialled port")
        if await _shares_servers(connect, first):
            return Detected(transaction_pooling=True, proxied=True, how="two clients were served by one server")
    finally:
        await _close(first)
    if await is_pgbouncer(console_dsn):
        raise PoolerModeError(session_mode_message(address, database))
    return Detected(transaction_pooling=False, proxied=True, how="a proxy that keeps one server connection per client")


PROBE_CLIENTS = 4
PROBE_ROUNDS = 10


async def _shares_servers(connect: Any, first: asyncpg.Connection) -> bool:
    """Whether two of a few concurrently open clients are ever served by the same server pid.

    Directly or through session pooling that can never happen; a transaction pooler hands
    the server connection a client just released to the next client (PgBouncer reuses the
    most recent one first), so on a quiet pooler the second query already proves it, and
    on a busy one forty queries over a pool of a hundred collide all but surely."""
    clients = [first]
    try:
        for _ in range(PROBE_CLIENTS - 1):
            clients.append(await connect())
        seen: dict[int, int] = {}
        for _ in range(PROBE_ROUNDS):
            for index, client in enumerate(clients):
                pid = await _server_pid(client)
                if seen.setdefault(pid, index) != index:
                    return True
        return False
    finally:
        for client in clients[1:]:
            await _close(client)


def session_mode_message(address: str, database: str) -> str:
    return (
        f"PgBouncer at {address} pools database '{database}' in session mode: every Soniq pool connection "
        "would pin a server connection, so the pooler caps nothing and stalls workers once its pool_size is "
        "reached; set pool_mode = transaction for this database in pgbouncer.ini, or connect to PostgreSQL "
        "directly (then set pooling=direct)"
    )


def console_dsn_for(dsn: str) -> str:
    """The same address and user, database ``pgbouncer``: PgBouncer's admin console."""
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/pgbouncer", parts.query, parts.fragment))


async def is_pgbouncer(console_dsn: str) -> bool:
    """Whether the address is PgBouncer: PostgreSQL has no database ``pgbouncer``, PgBouncer
    always answers for its console (letting us in, or refusing the user by name)."""
    try:
        console = await asyncpg.connect(console_dsn, statement_cache_size=0, timeout=5)
    except asyncpg.InvalidCatalogNameError:
        return False
    except asyncpg.PostgresError as exc:
        return "pgbouncer" in str(exc).lower() or "not allowed" in str(exc).lower()
    except Exception:
        return False
    await _close(console)
    return True


async def _close(connection: asyncpg.Connection) -> None:
    with contextlib.suppress(Exception):
        await connection.close(timeout=2)


async def resolve(options: PostgresOptions) -> tuple[PostgresOptions, str]:
    """The options to open the pool with, and one line saying how wake-ups arrive.

    ``direct`` costs nothing; ``auto`` and ``transaction`` open one or two short
    probe connections (``transaction`` is never downgraded by what they find)."""
    transaction = options.pooling == "transaction"
    how = "pooling=transaction"
    if options.pooling != "direct":
        probe = functools.partial(asyncpg.connect, options.dsn, statement_cache_size=0, timeout=options.connect_timeout)
        try:
            detected = await detect(
                probe,
                dialled_port=options.port,
                console_dsn=console_dsn_for(options.dsn),
                database=options.database,
                address=options.address,
            )
        except (asyncpg.PostgresError, OSError, TimeoutError) as exc:
            raise connect_error(options, exc) from exc
        if detected.transaction_pooling and not transaction:
            transaction, how = True, f"transaction pooling detected: {detected.how}"
    if not transaction:
        listen_at = "listen_url" if options.listen_dsn is not None else options.address
        wakeups = f"LISTEN/NOTIFY on {listen_at}" if options.listen else "polling (listen=false)"
        return options, f"PostgreSQL at {options.address} (direct); wake-ups by {wakeups}"
    if options.listen_explicit and options.listen and options.listen_dsn is None:
        raise PoolerModeError(
            f"listen=true, but PostgreSQL at {options.address} sits behind a transaction pooler ({how}), "
            "which cannot hold a LISTEN; give listen_url= (a direct connection for wake-ups), or drop listen=true"
        )
    listen = options.listen and options.listen_dsn is not None
    resolved = dataclasses.replace(
        options,
        transaction_pooled=True,
        listen=listen,
        statement_cache_size=options.statement_cache_size if options.statement_cache_explicit else 0,
    )
    wakeups = "LISTEN on the direct listen_url connection" if listen else "polling (no listen_url given)"
    cache = f"size {resolved.statement_cache_size}" if resolved.statement_cache_size else "off"
    return resolved, (
        f"PostgreSQL at {options.address} through a transaction pooler ({how}); "
        f"statement cache {cache}; wake-ups by {wakeups}"
    )
