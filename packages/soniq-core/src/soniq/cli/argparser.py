"""`SoniqArgumentParser`, the parser every ``soniq`` command is built on, apart from the commands
themselves (`soniq.cli.parser` assembles them), so a command module can name its type."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from soniq.cli.common import EXIT_USAGE
from soniq.cli.output import safe

__all__ = ["Register", "SoniqArgumentParser"]

Register = Callable[["argparse._SubParsersAction[SoniqArgumentParser]", "SoniqArgumentParser"], None]


class SoniqArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line naming the command and its ``--help``."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {safe(message)} ({self.prog} --help)\n")
        sys.exit(EXIT_USAGE)

    def unrecognized(self, extras: Sequence[str]) -> NoReturn:
        """Report flags this (sub)command does not know, with the closest known flag when one is near."""
        known = [opt for action in self._actions for opt in action.option_strings if opt.startswith("--")]
        hint = ""
        for extra in extras:
            if extra.startswith("-"):
                close = difflib.get_close_matches(extra.split("=", 1)[0], known, n=1)
                if close:
                    hint = f"; did you mean {close[0]}?"
                    break
        self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
