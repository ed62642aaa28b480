"""``soniq migrate-status``: the schema steps applied to the store, and those ``soniq setup`` would apply."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from soniq.cli.common import EXIT_ERROR, EXIT_OK, build_app, refuse_to_create_default, run_with_app
from soniq.cli.migrations import setup_plan
from soniq.cli.output import safe
from soniq.records import SchemaStatus

if TYPE_CHECKING:
    from soniq.app import Soniq
    from soniq.cli.argparser import SoniqArgumentParser


def _print(status: SchemaStatus) -> None:
    print(f"backend:  {safe(status.backend)} ({safe(status.location)})")
    print(f"version:  {status.current_version if status.current_version is not None else 'none (not set up)'}")
    if status.newer_than_known:
        print("status:   written by a newer release than this one; upgrade the backend distribution")
    else:
        print(f"status:   {'up to date' if status.up_to_date else f'{len(status.pending)} step(s) pending'}")
    for step in status.applied:
        when = f"  applied {step.applied_at.isoformat()}" if step.applied_at else ""
        print(f"  applied  {step.version:>3}  {safe(step.name)}{when}")
    for step in status.pending:
        print(f"  pending  {step.version:>3}  {safe(step.name)}")
    if status.pending:
        print("run `soniq setup` to apply the pending steps")


def cmd_migrate_status(args: argparse.Namespace) -> int:
    app = build_app(args, need_jobs=False)
    refuse_to_create_default(app, "migrate-status")

    async def body(app: Soniq) -> tuple[SchemaStatus, dict[str, str]]:
        return await app.schema_status(), await setup_plan(app)  # family and what setup does

    status, plan = run_with_app(app, body)
    if args.json:
        print(json.dumps({**status.to_dict(), **plan}, indent=2))
    else:
        _print(status)
        print(f"family:   {plan['family']}")
        print(f"setup:    {safe(plan['setup'])}")
    refused = plan["setup"].startswith("refuse")
    return EXIT_ERROR if (args.check and not status.up_to_date) or refused else EXIT_OK


def register(sub: argparse._SubParsersAction[SoniqArgumentParser], common: SoniqArgumentParser) -> None:
    p = sub.add_parser("migrate-status", parents=[common], help="applied and pending schema steps (changes nothing)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--check", action="store_true", help="exit 1 when a step is pending (for deploy scripts)")
    p.set_defaults(func=cmd_migrate_status, parser=p)
