"""pgqueuer's own command line (`pgq ...`, its console script), with one bug worked around.

    python pgq_cli.py run jobs_pgqueuer:create [--max-concurrent-tasks C --batch-size B]

pgqueuer 1.6.0's `pgq run` crashes before it starts with the typer it installs:
the `--log-level` option's parser hands `setup_fancy_logger` a `str` where it
expects a `LogLevel` (AttributeError: 'str' object has no attribute 'name').
This wraps that one function to accept the name, then calls the console
script's entry point unchanged, so option parsing, the defaults (batch size
10, no cap on concurrent tasks), the supervisor and the event loop (uvloop,
which pgqueuer depends on) are exactly what `pgq run` uses.
"""

from __future__ import annotations

from typing import Any

from pgqueuer.__main__ import main
from pgqueuer.core import logconfig

_setup_fancy_logger = logconfig.setup_fancy_logger


def _setup_accepting_names(level: Any) -> None:
    if isinstance(level, str):
        level = logconfig.LogLevel[level.upper()]
    _setup_fancy_logger(level)


logconfig.setup_fancy_logger = _setup_accepting_names

if __name__ == "__main__":
    main()
