"""One aiosqlite connection per backend, with locking, busy retries and error mapping.

aiosqlite runs every statement of a connection on one thread, in order, so a
single connection is enough for one backend instance. What it does not give is
isolation between coroutines: a statement issued while another coroutine has a
``BEGIN`` open would land inside that transaction. Every operation therefore
holds `_lock`, and every multi-statement transaction runs in a shielded task so
that cancelling the caller can never leave the connection (and the file's write
lock) inside an open transaction. Single-statement writes that arrive while the
connection is busy are combined into one round trip and one commit.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, TypeVar, cast

import aiosqlite

from soniq.backend.event_loops import EventLoopBinding
from soniq.errors import BackendUnavailableError, SoniqError
from soniq_sqlite.location import DatabaseLocation

T = TypeVar("T")
Body = Callable[[aiosqlite.Connection], Awaitable[T]]
Synchronous = Literal["off", "normal", "full", "extra"]

logger = logging.getLogger("soniq_sqlite")

MINIMUM_SQLITE = (3, 35, 0)
"""``UPDATE ... RETURNING`` arrived in SQLite 3.35."""

_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
# Result codes that mean the file itself is unusable rather than the statement wrong.
_UNAVAILABLE_CODES = (
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_CORRUPT,
    sqlite3.SQLITE_NOTADB,
    sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_PERM,
    sqlite3.SQLITE_AUTH,
)
_BUSY_RETRIES = 6
_BACKOFF_FIRST = 0.005
_BACKOFF_CAP = 0.25


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def is_busy(exc: BaseException) -> bool:
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = _primary_code(exc)
    if code is not None:
        return code in _BUSY_CODES
    message = str(exc)
    return "database is locked" in message or "database table is locked" in message


class Database:
    """The connection of one backend instance to one SQLite database."""

    def __init__(
        self,
        location: DatabaseLocation,
        *,
        busy_timeout: float,
        synchronous: Synchronous,
        create_if_missing: bool = True,
    ) -> None:
        self.location = location
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        self.create_if_missing = create_if_missing
        self._loop = EventLoopBinding()
        self._conn: aiosqlite.Connection | None = None
        self._lock: asyncio.Lock | None = None
        self._open_lock: asyncio.Lock | None = None
        self._pending: list[tuple[str, Sequence[Any], asyncio.Future[int]]] = []
        self._flusher: asyncio.Future[None] | None = None

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    # -- lifecycle ---------------------------------------------------------

    async def open(self) -> bool:
        """Open the connection unless it is open; True when this call opened it."""
        self._follow_loop()
        if self._conn is not None:
            return False
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self.is_open:  # another caller opened it while we waited
                return False
            self._conn = await self._connect()
            self._lock = asyncio.Lock()
            return True

    async def _connect(self) -> aiosqlite.Connection:
        if sqlite3.sqlite_version_info < MINIMUM_SQLITE:
            raise SoniqError(
                f"soniq-sqlite needs SQLite {'.'.join(map(str, MINIMUM_SQLITE))} or newer "
                f"(for UPDATE ... RETURNING); this Python links SQLite {sqlite3.sqlite_version}"
            )
        self._check_path()
        try:
            pending = aiosqlite.connect(self.location.target, timeout=self.busy_timeout, isolation_level=None)
            _daemonize(pending)
            conn = await pending
        except sqlite3.Error as exc:
            raise self._unavailable(exc, "cannot be opened") from exc
        try:
            await self._configure(conn)
        except BaseException as exc:
            await conn.close()
            if isinstance(exc, sqlite3.Error):
                raise self._unavailable(exc, "cannot be opened") from exc
            raise
        return conn

    def _check_path(self) -> None:
        path = self.location.path
        if path is None:
            return
        if not path.parent.is_dir():
            raise BackendUnavailableError(
                f"{self.location.describe()} cannot be created: the directory {path.parent} does not exist"
            )
        if path.is_dir():
            raise BackendUnavailableError(f"{self.location.describe()} is a directory, not a database file")
        if path.is_symlink() and not path.exists():
            raise BackendUnavailableError(
                f"{self.location.describe()} is a symbolic link to {os.readlink(path)}, which does not exist; "
                "Soniq does not create a database through a dangling link (remove the link or create its target)"
            )
        if path.exists():
            return
        if not self.create_if_missing:
            raise BackendUnavailableError(
                f"{self.location.describe()} does not exist (create_if_missing=False); run `soniq setup` "
                "or point the URL at the queue's file"
            )
        # Job arguments and results are private to the application: create the
        # file 0600 before SQLite opens it (its -wal and -shm files copy the mode).
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            return  # another process created it first
        except OSError as exc:
            raise BackendUnavailableError(f"{self.location.describe()} cannot be created: {exc}") from exc
        os.close(fd)

    async def _configure(self, conn: aiosqlite.Connection) -> None:
        for attempt in range(_BUSY_RETRIES + 1):
            try:
                if not self.location.is_memory:
                    # WAL lets readers and one writer work at once across processes; the
                    # mode is persistent in the file, so this is a no-op after the first time.
                    rows = list(await conn.execute_fetchall("PRAGMA journal_mode = WAL"))
                    mode = str(rows[0][0]).lower() if rows else ""
                    if mode != "wal":
                        logger.warning(
                            "%s stays in journal mode %r (WAL unsupported here, e.g. a network "
                            "filesystem); concurrent workers will contend more",
                            self.location.describe(),
                            mode,
                        )
                await conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
                await conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
                return
            except sqlite3.OperationalError as exc:
                if not is_busy(exc) or attempt == _BUSY_RETRIES:
                    raise
                await asyncio.sleep(_backoff(attempt))

    def _follow_loop(self) -> None:
        """Start afresh when called from another event loop than the connection's (see
        `EventLoopBinding`); the locks and the pending group commit go too, and the old
        connection is stopped on its own thread, unawaited."""
        if not self._loop.moved():
            return
        conn, self._conn = self._conn, None
        self._lock = None
        self._open_lock = None
        self._flusher = None
        # Their callers' loop is gone; nobody is left to read the outcome.
        self._pending = []
        if conn is not None:
            # Closes the sqlite3 connection (rolling back anything left open) and ends the thread.
            conn.stop()

    async def close(self) -> None:
        self._follow_loop()
        if self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)
        conn, self._conn = self._conn, None
        if conn is None:
            return
        lock = self._lock
        if lock is not None:
            await lock.acquire()
        try:
            try:
                await conn.execute("PRAGMA optimize")
            except (sqlite3.Error, ValueError):
                pass  # already closed under us; nothing to tidy
            await conn.close()
        finally:
            if lock is not None:
                lock.release()

    # -- running statements ---------------------------------------------

    async def fetchall(self, sql: str, parameters: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """One statement in autocommit mode; its rows."""

        async def body(conn: aiosqlite.Connection) -> list[sqlite3.Row]:
            return list(await conn.execute_fetchall(sql, parameters))

        return await self._run(body)

    async def execute(self, sql: str, parameters: Sequence[Any] = ()) -> int:
        """One write statement, atomic on its own; the number of rows it changed.

        Statements issued while the connection is busy are combined: the next
        round runs all of them in one trip to aiosqlite's thread and one
        commit (group commit), each still reporting its own row count or
        error. A worker's many small fenced updates then cost one round trip
        together instead of one each. The write happens even if the caller
        stops waiting for it.
        """
        await self.open()
        conn = self._conn
        if conn is None or _raw_runner(conn) is None:
            return await self._run_single(sql, parameters)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending.append((sql, parameters, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        return await future

    async def _run_single(self, sql: str, parameters: Sequence[Any]) -> int:
        async def body(conn: aiosqlite.Connection) -> int:
            cursor = await conn.execute(sql, parameters)
            return cursor.rowcount

        return await self._run(body)

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            statements = [(sql, parameters) for sql, parameters, _ in batch]

            async def body(
                conn: aiosqlite.Connection, statements: list[tuple[str, Sequence[Any]]] = statements
            ) -> list[int | Exception]:
                runner = _raw_runner(conn)
                if runner is None:
                    return [(await conn.execute(sql, parameters)).rowcount for sql, parameters in statements]
                return await runner(lambda raw: _write_batch(raw, statements))

            try:
                outcomes = await self._run(body)
            except BaseException as exc:
                for *_, future in batch:
                    if future.done():
                        continue
                    if isinstance(exc, Exception):
                        future.set_exception(exc)
                    else:
                        future.cancel()
                if not isinstance(exc, Exception):
                    raise
                continue
            for (*_, future), outcome in zip(batch, outcomes, strict=True):
                if future.done():
                    continue
                if isinstance(outcome, sqlite3.Error):
                    future.set_exception(self.translate(outcome))
                elif isinstance(outcome, Exception):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Every row in one write transaction: all or none."""
        batch = list(rows)

        async def body(conn: aiosqlite.Connection) -> None:
            await conn.executemany(sql, batch)

        await self.transaction(body)

    async def transaction(self, body: Body[T], *, write: bool = True) -> T:
        """Run `body` between ``BEGIN IMMEDIATE`` (or a deferred ``BEGIN`` for a
        consistent read) and ``COMMIT``, rolling back on any error.

        ``BEGIN IMMEDIATE`` takes the file's write lock up front, so two
        processes can never both read the same queued rows and then both
        update them, and SQLite's busy handler (not an immediate error) covers
        the wait for the lock.
        """
        begin = "BEGIN IMMEDIATE" if write else "BEGIN"

        async def wrapped(conn: aiosqlite.Connection) -> T:
            await conn.execute(begin)
            try:
                result = await body(conn)
                await conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    try:
                        await conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        logger.exception("rollback failed on %s", self.location.describe())
                raise
            return result

        return await self._shielded(wrapped)

    async def transaction_raw(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """`transaction` for a plain function of the sqlite3 connection, run whole on
        aiosqlite's thread: BEGIN IMMEDIATE, the body and COMMIT cost one round trip, so
        the file's write lock is held only while SQLite works, never across an event-loop
        turn. For multi-statement writes that every worker process takes turns at."""

        def wrapped(raw: sqlite3.Connection) -> T:
            raw.execute("BEGIN IMMEDIATE")
            try:
                result = body(raw)
                raw.execute("COMMIT")
            except BaseException:
                if raw.in_transaction:
                    raw.execute("ROLLBACK")
                raise
            return result

        async def run(conn: aiosqlite.Connection) -> T:
            return await run_raw(conn, wrapped)

        await self.open()
        if self._conn is not None and _raw_runner(self._conn) is not None:
            # One call on aiosqlite's thread runs BEGIN to COMMIT whatever happens to the caller:
            # a cancelled caller cannot leave the transaction open, so no shielded task is needed.
            return await self._run(run)
        return await self._shielded(run)

    async def _shielded(self, body: Body[T]) -> T:
        task = asyncio.ensure_future(self._run(body))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            # The transaction finishes (commit or rollback) on its own; nobody reads its outcome.
            task.add_done_callback(_consume_outcome)
            raise

    async def _run(self, body: Body[T]) -> T:
        await self.open()
        lock, conn = self._lock, self._conn
        if lock is None or conn is None:  # closed between open() and here
            raise BackendUnavailableError(f"{self.location.describe()}: the backend was closed")
        async with lock:
            for attempt in range(_BUSY_RETRIES + 1):
                try:
                    return await body(conn)
                except sqlite3.Error as exc:
                    if not is_busy(exc) or attempt == _BUSY_RETRIES:
                        translated = self.translate(exc)
                        if translated is exc:
                            raise
                        raise translated from exc
                except ValueError as exc:
                    # Only aiosqlite's "Connection closed" (close() ran under our feet) means
                    # the store is gone; an encoding error is the caller's value, as it is.
                    if not _is_closed_error(exc, conn):
                        raise
                    raise BackendUnavailableError(f"{self.location.describe()}: {exc}") from exc
                await asyncio.sleep(_backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    # -- errors ------------------------------------------------------------

    def translate(self, exc: sqlite3.Error) -> BaseException:
        """The exception callers see for a driver error."""
        if is_busy(exc):
            return BackendUnavailableError(
                f"{self.location.describe()} stayed locked by another connection beyond "
                f"busy_timeout={self.busy_timeout:g}s and {_BUSY_RETRIES} retries: {exc}"
            )
        code = _primary_code(exc)
        if code in _UNAVAILABLE_CODES or isinstance(exc, sqlite3.InterfaceError):
            return self._unavailable(exc, "is unusable")
        if isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc).lower():
            return self._unavailable(exc, "was closed")
        return exc

    def _unavailable(self, exc: sqlite3.Error, what: str) -> BackendUnavailableError:
        hint = ""
        if self.location.path is not None:
            hint = " (check that the directory exists and that this process may write the file and its directory)"
        return BackendUnavailableError(f"{self.location.describe()} {what}: {exc}{hint}")


def _raw_runner(conn: aiosqlite.Connection) -> Callable[[Callable[[sqlite3.Connection], T]], Awaitable[T]] | None:
    """Run a plain function against the sqlite3 connection on aiosqlite's own thread.

    aiosqlite has no public call for this; its `_execute` and `_conn` have been
    stable for years. Without them, callers fall back to one statement per trip.
    """
    execute = getattr(conn, "_execute", None)
    if execute is None or not isinstance(getattr(type(conn), "_conn", None), property):
        return None

    async def run(function: Callable[[sqlite3.Connection], T]) -> T:
        result: T = await execute(lambda: function(conn._conn))
        return result

    return run


async def run_raw(conn: aiosqlite.Connection, function: Callable[[sqlite3.Connection], T]) -> T:
    """Run `function` with the sqlite3 connection, inside the caller's open transaction when
    there is one: on aiosqlite's thread in one trip (see `_raw_runner`), or, on an aiosqlite
    without those hooks, on a helper thread whose every statement the event loop hands to
    aiosqlite (`_Bridged`): slower, same outcome."""
    runner = _raw_runner(conn)
    if runner is not None:
        return await runner(function)
    bridged = cast(sqlite3.Connection, _Bridged(conn, asyncio.get_running_loop()))
    return await asyncio.to_thread(function, bridged)


class _Rows:
    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def fetchall(self) -> list[Any]:
        return self._rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


class _Bridged:
    """The part of a sqlite3 connection `run_raw`'s functions use, for a helper thread: each
    statement runs on the aiosqlite connection through the event loop, in order."""

    def __init__(self, conn: aiosqlite.Connection, loop: asyncio.AbstractEventLoop) -> None:
        self._conn, self._loop = conn, loop

    def _wait(self, work: Awaitable[T]) -> T:
        async def run() -> T:
            return await work

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> _Rows:
        return _Rows(list(self._wait(self._conn.execute_fetchall(sql, parameters))))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self._wait(self._conn.executemany(sql, list(rows)))

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction


def _write_batch(conn: sqlite3.Connection, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[int | Exception]:
    """Runs on aiosqlite's thread: every statement in one transaction, each with its own outcome."""
    if len(statements) == 1:
        sql, parameters = statements[0]
        return [conn.execute(sql, parameters).rowcount]
    conn.execute("BEGIN IMMEDIATE")
    outcomes: list[int | Exception] = []
    try:
        for sql, parameters in statements:
            try:
                outcomes.append(conn.execute(sql, parameters).rowcount)
            except sqlite3.Error as exc:
                # A failed statement is undone on its own; busy or a lost
                # transaction fails (and retries) the whole round instead.
                if is_busy(exc) or not conn.in_transaction:
                    raise
                outcomes.append(exc)
            except (ValueError, OverflowError) as exc:
                # A parameter sqlite3 cannot bind (a lone surrogate, an integer
                # beyond 64 bits): that statement never ran; the others stand.
                outcomes.append(exc)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return outcomes


def _daemonize(conn: aiosqlite.Connection) -> None:
    """Make the not yet started aiosqlite thread a daemon.

    Its thread is not a daemon, and it waits for work forever: a program that
    forgot ``close()`` would hang at exit. What the thread holds is committed
    or rolled back by SQLite itself when the process ends.
    """
    thread = getattr(conn, "_thread", conn)
    if isinstance(thread, threading.Thread) and not thread.is_alive():
        thread.daemon = True


def _is_closed_error(exc: ValueError, conn: aiosqlite.Connection) -> bool:
    if isinstance(exc, UnicodeError):
        return False
    message = str(exc).lower()
    return "closed" in message or "no active connection" in message or not getattr(conn, "_running", True)


def _backoff(attempt: int) -> float:
    ceiling = min(_BACKOFF_CAP, _BACKOFF_FIRST * float(1 << attempt))
    return ceiling / 2 + random.random() * ceiling / 2


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("a cancelled caller's SQLite transaction failed: %r", task.exception())
