"""Subcommands contributed by other distributions through the ``soniq.commands`` entry points.

The entry name is the subcommand; the value (``module:attr``) is a callable
``add(parser)`` that receives the subcommand's own `argparse.ArgumentParser`
(which already has ``--database-url``, ``--jobs-modules`` and ``-v``), adds its
arguments, and sets ``parser.set_defaults(func=run)`` where ``run(args) -> int``
is the exit code. An optional ``help`` attribute on the callable is the
one-line description in ``soniq --help``.

Only the entry point of the subcommand being run is imported: ``soniq worker``
never pays for a dashboard's web stack. The others appear in ``soniq --help``
from their metadata alone.
"""

from __future__ import annotations

import argparse
import importlib.metadata
from collections.abc import Sequence
from typing import Any, Protocol

from soniq.errors import InternalError

COMMANDS_GROUP = "soniq.commands"


class CommandLoadError(InternalError):
    """A ``soniq.commands`` entry point failed to import."""


class Command(Protocol):
    """What a ``soniq.commands`` entry point's value must be."""

    def __call__(self, parser: argparse.ArgumentParser, /) -> None: ...


def requested_command(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first non-option word)."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


def add_plugin_commands(
    sub: Any, common: argparse.ArgumentParser, argv: Sequence[str], *, taken: Sequence[str]
) -> None:
    """Add every installed command that does not shadow a built-in one; load only the requested one."""
    wanted = requested_command(argv)
    for ep in sorted(importlib.metadata.entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        if ep.name in taken:
            continue
        dist = getattr(ep, "dist", None)
        origin = f"from {dist.metadata['Name']} {dist.version}" if dist is not None else f"from {ep.value}"
        if ep.name != wanted:
            sub.add_parser(ep.name, parents=[common], help=origin, add_help=False)
            continue
        try:
            add: Command = ep.load()
        except (ImportError, AttributeError) as exc:
            raise CommandLoadError(
                f"the command '{ep.name}' ({ep.value}, entry-point group {COMMANDS_GROUP}) failed to import: {exc}"
            ) from exc
        parser = sub.add_parser(ep.name, parents=[common], help=getattr(add, "help", None) or origin)
        add(parser)
