"""``soniq setup --dry-run/--force``, and what ``migrate-status`` says `setup` would do.

``soniq migrations export`` (a backend's schema as SQL) belongs to the backend that owns the SQL:
soniq-postgres adds it through the ``soniq.commands`` entry points.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from soniq.backend import SchemaAdmin, has_role
from soniq.cli.common import EXIT_OK, build_app, run_with_app
from soniq.records import SchemaReport
from soniq.redaction import redact_url
from soniq.schema_state import SchemaFamily, SchemaStateError

if TYPE_CHECKING:
    from soniq.app import Soniq


def what_setup_does(report: SchemaReport) -> str:
    if report.upgraded_from is not None:
        pending = list(report.pending)
        return f"upgrade the {report.upgraded_from} schema in place, keeping every row (migrations {pending})"
    if report.family == SchemaFamily.EMPTY.value:
        return "create the schema" + (f" (migrations {list(report.pending)})" if report.pending else "")
    if report.pending:
        return f"apply migrations {list(report.pending)}"
    return "nothing: the schema is current"


async def setup_plan(app: Soniq) -> dict[str, str]:
    """The schema family found and what `soniq setup` would do, from a dry run."""
    try:
        report = await app.setup_schema(dry_run=True)
    except SchemaStateError as exc:
        return {"family": exc.family.value, "setup": f"refuse: {exc}"}
    return {"family": report.family, "setup": what_setup_does(report)}


def cmd_setup(args: argparse.Namespace) -> int:
    app = build_app(args, need_jobs=False)

    async def body(app: Soniq) -> SchemaReport | None:
        if not args.dry_run and not args.force and not has_role(app.backend, SchemaAdmin):
            # No schema reports on this backend: plain `setup()`, which every backend has.
            await app.setup()
            return None
        return await app.setup_schema(dry_run=args.dry_run, force=args.force)

    report = run_with_app(app, body)
    where = redact_url(app.settings.resolved_database_url)
    if report is None:
        print(f"schema ready at {where}")
        return EXIT_OK
    if args.dry_run:
        print(f"-- soniq setup --dry-run on {where}: found {report.family}; setup would {what_setup_does(report)}")
        for statement in report.statements:
            print(statement.rstrip().rstrip(";") + ";\n")
        return EXIT_OK
    if report.upgraded_from is not None:
        print(f"upgraded the {report.upgraded_from} schema at {where} in place")
    print(f"schema ready at {where}")
    return EXIT_OK


def add_setup_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="change nothing; print the SQL setup would run")
    parser.add_argument(
        "--force",
        action="store_true",
        help="upgrade a soniq 0.1.0 database even while its workers still heartbeat (their jobs go to stale recovery)",
    )
