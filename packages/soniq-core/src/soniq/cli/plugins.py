"""``soniq backends`` and the text of ``soniq --version``."""

from __future__ import annotations

import argparse
from importlib import metadata
from typing import TYPE_CHECKING

from soniq.cli.common import EXIT_OK
from soniq.commands import COMMANDS_GROUP
from soniq.discovery import BACKENDS_GROUP, OBSERVERS_GROUP, plugins

if TYPE_CHECKING:
    from soniq.cli.argparser import SoniqArgumentParser


def version_text() -> str:
    try:
        core = metadata.version("soniq-core")
    except metadata.PackageNotFoundError:
        core = "unknown"
    lines = [f"soniq-core {core}"]
    seen: dict[str, list[str]] = {}
    for plugin in plugins(BACKENDS_GROUP):
        key = f"{plugin.distribution or '?'} {plugin.version or '?'}"
        seen.setdefault(key, []).append(plugin.name)
    for dist, schemes in sorted(seen.items()):
        lines.append(f"{dist} ({', '.join(schemes)})")
    return "\n".join(lines)


def cmd_backends(args: argparse.Namespace) -> int:
    for group, title in ((BACKENDS_GROUP, "backends"), (OBSERVERS_GROUP, "observers"), (COMMANDS_GROUP, "commands")):
        found = plugins(group)
        print(f"{title} ({group}):")
        if not found:
            print("  none installed")
        for p in found:
            print(f"  {p.name:<12} {p.value:<40} {p.distribution or '?'} {p.version or '?'}")
    return EXIT_OK


def register(sub: argparse._SubParsersAction[SoniqArgumentParser], common: SoniqArgumentParser) -> None:
    p = sub.add_parser("backends", parents=[common], help="installed backends, observers and commands")
    p.set_defaults(func=cmd_backends, parser=p)
