"""The ``soniq`` command line.

Every command takes ``--database-url`` (else ``SONIQ_DATABASE_URL``, else the
embedded SQLite default) and ``--log-level``. Usage errors print one line
naming the command's ``--help`` and exit 2; other expected failures print one
line, ``soniq: error: ...``, and exit 1. Nothing printed shows a password or a
raw control character from job data.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from soniq.cli.common import EXIT_ERROR, CLIError, build_app
from soniq.cli.output import SafeFormatter, message
from soniq.cli.parser import SoniqArgumentParser, build_parser
from soniq.commands import CommandLoadError
from soniq.errors import SoniqError
from soniq.redaction import redact_url

__all__ = ["CLIError", "build_app", "build_parser", "main", "redact_url"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Failures a user can cause and fix; anything else is a bug, reported in one line too.
EXPECTED_ERRORS = (CLIError, SoniqError, ValueError, TypeError, OverflowError, RecursionError, OSError)


def configure_logging(level: str | None) -> None:
    """Soniq's loggers at `level` (INFO by default); every other library stays at INFO."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter(LOG_FORMAT))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    logging.getLogger("soniq").setLevel(getattr(logging, level or "INFO"))


def env_log_level() -> str | None:
    """``SONIQ_LOG_LEVEL`` (the 0.1.0 `log_level` setting) when ``--log-level`` is not given; a bad one is ignored."""
    value = os.environ.get("SONIQ_LOG_LEVEL", "").strip().upper()
    return value if value in logging.getLevelNamesMapping() and value != "NOTSET" else None


def one_line(exc: BaseException) -> str:
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return message(text or type(exc).__name__)


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser(words)
    except CommandLoadError as exc:
        print(f"soniq: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    args, extras = parser.parse_known_args(words)
    if extras:
        chosen: SoniqArgumentParser = getattr(args, "parser", parser)
        chosen.unrecognized(extras)
    configure_logging(getattr(args, "log_level", None) or env_log_level())
    try:
        code: int = args.func(args)
        return code
    except BrokenPipeError:
        # `soniq status | head`: the reader left; say nothing, and keep the flush at exit from failing too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except EXPECTED_ERRORS as exc:
        print(f"soniq: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        logging.getLogger("soniq.cli").debug("unexpected error", exc_info=True)
        print(
            f"soniq: error: unexpected {type(exc).__name__}: {one_line(exc)} (--log-level DEBUG shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_ERROR
