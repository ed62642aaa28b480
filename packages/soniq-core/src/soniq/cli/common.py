"""What every command shares: finding the app, opening and closing it, one-line errors."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from soniq.app import Soniq
from soniq.errors import InternalError, SoniqError
from soniq.redaction import redact_text, redact_url
from soniq.settings import DEFAULT_DATABASE_URL

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
CLOSE_TIMEOUT_SECONDS = 10.0

T = TypeVar("T")
logger = logging.getLogger("soniq.cli")


class CLIError(InternalError):
    """A failure to report as one line, exit 1."""


def split_names(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [part.strip() for part in value.split(",") if part.strip()]


def _path_hint(name: str) -> str | None:
    """The dotted module name a file path was probably meant as, else None."""
    if "/" not in name and "\\" not in name and not name.endswith(".py"):
        return None
    stem = name[:-3] if name.endswith(".py") else name
    dotted = ".".join(part for part in stem.replace("\\", "/").split("/") if part not in ("", "."))
    return dotted or None


def import_jobs_modules(modules: Sequence[str]) -> None:
    """Import the jobs modules, finding them in the working directory too.

    The working directory goes LAST on `sys.path`: first, a stray
    ``aiosqlite.py`` or ``asyncpg.py`` lying there would be imported in place
    of the real driver.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)
    for name in modules:
        dotted = _path_hint(name)
        if dotted is not None:
            raise CLIError(f"--jobs-modules takes module names, not file paths: use {dotted!r} instead of {name!r}")
        try:
            importlib.import_module(name)
        except SoniqError:
            raise
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            detail = f"{type(exc).__name__}: {exc}"
            raise CLIError(f"could not import jobs module {name!r}: {detail}") from None


def find_app(modules: Sequence[str]) -> Soniq | None:
    """The Soniq instance the modules' jobs are registered on (or that they define)."""
    candidates: list[Soniq] = []
    for name in modules:
        module = sys.modules.get(name)
        for value in vars(module).values() if module else ():
            if isinstance(value, Soniq) and value not in candidates:
                candidates.append(value)
    for app in Soniq.instances():
        if app not in candidates and any(m in app.registry.modules() for m in modules):
            candidates.append(app)
    with_jobs = [app for app in candidates if len(app.registry)] or candidates
    if len(with_jobs) > 1:
        listing = ", ".join(redact_text(repr(app)) for app in with_jobs)
        raise CLIError(f"the jobs modules define several Soniq apps ({listing}); keep one per worker")
    return with_jobs[0] if with_jobs else None


def check_port(url: str) -> None:
    """Refuse a URL whose port is not a number, in words, before a driver turns it into a traceback."""
    try:
        _ = urlsplit(url).port
    except ValueError:
        raise CLIError(f"invalid URL {redact_url(url)!r}: the port must be a number from 0 to 65535") from None


# -- the app by path: `soniq CMD APP` / `--app module:attr` --


def app_path(args: argparse.Namespace) -> str | None:
    """The ``module:attr`` the command was given, positionally or with ``--app`` (not both, unless equal)."""
    flag: str | None = getattr(args, "app", None)
    positional: str | None = getattr(args, "app_positional", None)
    if flag and positional and flag != positional:
        raise CLIError(f"the app is given twice, as {positional!r} and --app {flag!r}; pass one")
    return flag or positional or None


def load_app_path(path: str) -> Soniq:
    """The `Soniq` at ``module:attr`` (an instance, or a function of no arguments returning one)."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise CLIError(f"the app must be given as module:attribute (e.g. myproject.jobs:app), got {path!r}")
    import_jobs_modules([module_name])
    target: Any = sys.modules[module_name]
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CLIError(f"module {module_name!r} has no attribute {attr!r} (from the app path {path!r})") from None
    if not isinstance(target, Soniq) and callable(target):
        target = target()
    if not isinstance(target, Soniq):
        raise CLIError(f"{path} is a {type(target).__name__}, not a Soniq app")
    return target


def build_app(args: argparse.Namespace, *, need_jobs: bool) -> Soniq:
    modules = split_names(args.jobs_modules) if getattr(args, "jobs_modules", None) else None
    if modules is None:
        modules = split_names(os.environ.get("SONIQ_JOBS_MODULES")) or []
    url: str | None = getattr(args, "database_url", None)
    if url:
        check_port(url)
    app: Soniq | None = None
    path = app_path(args)
    if path:
        app = load_app_path(path)
        if modules:
            import_jobs_modules(modules)  # more jobs for that app, registered as their modules import
    elif modules:
        import_jobs_modules(modules)
        app = find_app(modules)
    if app is None:
        if need_jobs and modules:
            raise CLIError(f"no Soniq app with jobs found in {', '.join(modules)}")
        overrides: dict[str, Any] = {}
        if url:
            overrides["database_url"] = url
        app = Soniq(**overrides)
    elif url and url != app.settings.database_url:
        app.use_database_url(url)
    check_port(app.settings.resolved_database_url)
    return app


def default_database_file(app: Soniq) -> Path | None:
    """The file of the SQLite default when no URL was given at all, else None."""
    if app.settings.database_url is not None:
        return None
    parts = urlsplit(DEFAULT_DATABASE_URL)
    if parts.scheme != "sqlite":
        return None
    return Path.cwd() / unquote(parts.path)[1:]


def app_for_command(args: argparse.Namespace, command: str, *, need_jobs: bool = False) -> Soniq:
    """The app a command plugin works on, found as every `soniq` command finds it (APP or
    --app, else the jobs modules' app, else one from the URL); a read-only command with no URL
    set and no ``./soniq.db`` is refused rather than creating an empty database."""
    app = build_app(args, need_jobs=need_jobs)
    if not need_jobs:
        refuse_to_create_default(app, command)
    return app


def refuse_to_create_default(app: Soniq, command: str) -> None:
    """A read-only command must not leave an empty ``./soniq.db`` behind because no URL was set."""
    path = default_database_file(app)
    if path is None:
        return
    if not path.exists():
        raise CLIError(
            f"no database URL given and {path} does not exist; pass --database-url URL, set SONIQ_DATABASE_URL, "
            "or name the app whose URL to use (APP or --app myproject.jobs:app, or --jobs-modules myproject.jobs); "
            f"soniq {command} does not create a database (`soniq setup` creates the SQLite default)"
        )
    # The check above leaves a moment in which the file could go; the backend's own option closes it.
    try:
        app.use_database_url(DEFAULT_DATABASE_URL, create_if_missing=False)
    except (TypeError, SoniqError):
        pass  # a backend for this scheme without the option: the existence check stands alone


async def _with_app(app: Soniq, body: Callable[[Soniq], Awaitable[T]]) -> T:
    try:
        return await body(app)
    finally:
        try:
            await asyncio.wait_for(app.close(), CLOSE_TIMEOUT_SECONDS)
        except TimeoutError:
            logging.getLogger("soniq").warning(
                "closing the backend took over %gs; exiting without waiting for it", CLOSE_TIMEOUT_SECONDS
            )


def run_with_app(
    app: Soniq,
    body: Callable[[Soniq], Awaitable[T]],
    *,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> T:
    """Run `body` against the app on a fresh loop, closing the app however it ends.

    Like `asyncio.run`, except that the loop's teardown is bounded: `asyncio.run`
    waits without end for every leftover task to finish after cancelling it, so
    one handler that swallows `CancelledError` (already given up on by the
    worker) would keep a STOPPED worker's process alive for good.
    """
    runner = asyncio.Runner(loop_factory=loop_factory)
    try:
        return runner.run(_with_app(app, body))
    finally:
        close_loop(runner.get_loop(), grace=app.settings.cancel_grace_seconds)


def close_loop(loop: asyncio.AbstractEventLoop, *, grace: float) -> None:
    """Cancel what is still running, give it `grace` seconds, name what would not stop, close the loop."""
    if loop.is_closed():
        return
    try:
        leftovers = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in leftovers:
            task.cancel()
        if leftovers:
            done, pending = loop.run_until_complete(asyncio.wait(leftovers, timeout=grace))
            for task in done:
                if not task.cancelled():
                    task.exception()  # seen here: it no longer matters, and must not be logged at exit
            for task in pending:
                logger.warning(
                    "task %s (%s) did not stop within %gs of being cancelled at exit; closing the event loop "
                    "without it (does it catch CancelledError?)",
                    task.get_name(),
                    getattr(task.get_coro(), "__qualname__", "?"),
                    grace,
                )
                # Reported once, here, in words; asyncio would add "Task was destroyed but it is pending!"
                # at interpreter exit (the same switch `gather` uses for its children).
                setattr(task, "_log_destroy_pending", False)  # noqa: B010
        loop.run_until_complete(_bounded(loop.shutdown_asyncgens(), grace))
        loop.run_until_complete(_bounded(loop.shutdown_default_executor(), grace))
    finally:
        asyncio.set_event_loop(None)
        loop.close()


async def _bounded(step: Awaitable[None], grace: float) -> None:
    try:
        await asyncio.wait_for(step, grace)
    except TimeoutError:
        logger.warning("closing the event loop: a teardown step took over %gs; skipped", grace)
