"""``soniq keys generate`` and ``soniq keys rotate``: encryption keys for sealed jobs.

``generate`` prints a new Fernet key to put first in ``SONIQ_ENCRYPTION_KEYS``. ``rotate``
re-seals every stored sealed value with the first (newest) key, in pages of ``--batch-size``
rows; after it, keys behind the first may be removed. ``--dry-run`` counts without writing.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from soniq.cli.common import EXIT_OK, CLIError, build_app, refuse_to_create_default, run_with_app
from soniq.encryption import EncryptionUnavailableError, cipher_for, generate_key
from soniq.key_rotation import DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE, RotationReport, rotate_keys

if TYPE_CHECKING:
    from soniq.app import Soniq
    from soniq.cli.argparser import SoniqArgumentParser

__all__ = ["register"]

EXIT_UNDECRYPTABLE = 3
"""``rotate`` found values no configured key opens (it re-sealed every other one)."""


def cmd_keys(args: argparse.Namespace) -> int:
    if args.action == "generate":
        try:
            print(generate_key())
        except EncryptionUnavailableError as exc:
            raise CLIError(str(exc)) from None
        return EXIT_OK
    if not 1 <= args.batch_size <= MAX_BATCH_SIZE:
        raise CLIError(f"--batch-size must be from 1 to {MAX_BATCH_SIZE:,}, got {args.batch_size}")
    app = build_app(args, need_jobs=False)
    refuse_to_create_default(app, "keys rotate")
    if not app.settings.encryption_keys:
        raise CLIError("keys rotate needs the encryption keys: set SONIQ_ENCRYPTION_KEYS (newest first)")
    report: RotationReport = run_with_app(app, lambda app: _rotate(app, args))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(_summary(report))
    return EXIT_UNDECRYPTABLE if report.undecryptable else EXIT_OK


async def _rotate(app: Soniq, args: argparse.Namespace) -> RotationReport:
    cipher = cipher_for(app.settings.encryption_keys)
    return await rotate_keys(await app.connected_backend(), cipher, batch_size=args.batch_size, dry_run=args.dry_run)


def _summary(report: RotationReport) -> str:
    verb = "would re-seal" if report.dry_run else "re-sealed"
    lines = [
        f"{verb} {report.values_resealed} value(s) in {report.rows_resealed} row(s) of {report.rows_read} read "
        "with the newest key"
    ]
    if report.rows_changed_meanwhile:
        lines.append(f"{report.rows_changed_meanwhile} row(s) changed while being read; run rotate again for them")
    if report.undecryptable:
        listed = ", ".join(report.undecryptable_rows)
        lines.append(
            f"{report.undecryptable} row(s) hold values no configured key opens (left as they are): {listed}; "
            "add the key they were sealed with to SONIQ_ENCRYPTION_KEYS and run rotate again"
        )
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction[SoniqArgumentParser], common: SoniqArgumentParser) -> None:
    p = sub.add_parser("keys", parents=[common], help="make an encryption key, or re-seal stored jobs with the newest")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = actions.add_parser("generate", parents=[common], help="print a new Fernet key")
    q.set_defaults(parser=q)
    q = actions.add_parser("rotate", parents=[common], help="re-seal every stored sealed value with the newest key")
    q.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N", help="rows per page")
    q.add_argument("--dry-run", action="store_true", help="count what would be re-sealed; write nothing")
    q.add_argument("--json", action="store_true", help="print JSON instead of text")
    q.set_defaults(parser=q)
    p.set_defaults(func=cmd_keys, parser=p)
