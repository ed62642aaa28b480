"""The argument parser: one-line usage errors, the shared flags, and the one list of commands."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from soniq.cli import dead_letter, inspect, jobs, keys, migrate_status, plugins, queues, scheduler, worker
from soniq.cli.argparser import Register, SoniqArgumentParser
from soniq.cli.plugins import version_text
from soniq.commands import add_plugin_commands

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

__all__ = ["SoniqArgumentParser", "build_parser"]


class VersionAction(argparse.Action):
    """``soniq -V``: core's version and every installed backend's."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(version_text())
        parser.exit()


def add_log_flags(parser: argparse.ArgumentParser, *, default: str | None) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        dest="log_level",
        action="store_const",
        const="DEBUG",
        default=default,
        help="debug logging for Soniq's own loggers (same as --log-level DEBUG)",
    )
    parser.add_argument(
        "--log-level",
        dest="log_level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=default,
        metavar="LEVEL",
        help="level of the 'soniq' loggers: DEBUG, INFO (default), WARNING, ERROR or CRITICAL; "
        "other libraries stay at INFO",
    )


def common_flags() -> SoniqArgumentParser:
    """The flags every command takes."""
    common = SoniqArgumentParser(add_help=False)
    common.add_argument(
        "--database-url",
        default=None,
        metavar="URL",
        help="backend URL (default: the jobs modules' app, else SONIQ_DATABASE_URL, else sqlite:///soniq.db)",
    )
    common.add_argument(
        "--jobs-modules",
        default=None,
        metavar="MODULES",
        help="comma-separated dotted module names to import, e.g. myapp.jobs (default: SONIQ_JOBS_MODULES)",
    )
    common.add_argument(
        "--app",
        default=None,
        metavar="MODULE:ATTR",
        help="the Soniq app to use, e.g. myproject.jobs:app (also accepted as the command's first argument)",
    )
    # SUPPRESS: a subcommand that was not given the flag must not reset what `soniq -v CMD` set.
    add_log_flags(common, default=argparse.SUPPRESS)
    return common


# ``soniq CMD APP``: the app as the first argument, as soniq 0.1.0 took it.

NO_APP_COMMANDS = ("backends",)
"""Commands that never open an app, so take no APP."""


def add_app_positionals(sub: argparse._SubParsersAction[SoniqArgumentParser]) -> None:
    """``soniq CMD APP``: an optional first argument on every command that takes no other one."""
    for name, command in sub.choices.items():
        if name in NO_APP_COMMANDS:
            continue
        if any(not action.option_strings for action in command._actions):
            continue  # it has positionals (or subcommands) of its own: --app only
        command.add_argument(
            "app_positional",
            nargs="?",
            default=None,
            metavar="APP",
            help="the Soniq app as module:attr (same as --app)",
        )


def command_registrars() -> list[Register]:
    """Every built-in command group, in the order ``soniq --help`` lists them.

    Commands from other distributions (the ``soniq.commands`` entry points)
    are added right after these, in `build_parser`.
    """
    return [
        worker.register,
        scheduler.register,
        jobs.register,
        inspect.register,
        migrate_status.register,
        dead_letter.register,
        queues.register,
        keys.register,
        plugins.register,
    ]


def build_parser(argv: Sequence[str] = ()) -> SoniqArgumentParser:
    """The whole CLI; `argv` says which ``soniq.commands`` entry point to import (only the one run)."""
    parser = SoniqArgumentParser(
        prog="soniq",
        description="Soniq background jobs. Usage errors exit 2, other failures print one line and exit 1.",
    )
    parser.add_argument("-V", "--version", action=VersionAction, help="versions of soniq-core and installed backends")
    add_log_flags(parser, default=None)
    common = common_flags()
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in command_registrars():
        register(sub, common)
    add_plugin_commands(sub, common, argv, taken=list(sub.choices))
    add_app_positionals(sub)
    return parser
