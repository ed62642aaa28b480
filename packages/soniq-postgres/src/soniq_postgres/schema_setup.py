"""`setup_schema`: detect the family, plan the SQL, and run it in one locked transaction.

The plan is built as plain SQL before anything runs, so ``soniq setup --dry-run``
prints exactly what a real run executes (the one step done from Python, deriving
0.1.0 unique rows' dedup keys, is shown as a comment).
"""

from __future__ import annotations

import asyncpg

from soniq.backend import SchemaFamily, SchemaReport, SetupSchemaParams
from soniq.errors import SchemaStateError
from soniq_postgres import legacy_010
from soniq_postgres.migrations import LATEST_VERSION, MIGRATION_LOCK, MIGRATIONS
from soniq_postgres.options import quote_ident


def tracking_table_sql(quoted: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {quoted}.soniq_migrations (\n"
        "    version    integer     PRIMARY KEY,\n"
        "    name       text        NOT NULL,\n"
        "    applied_at timestamptz NOT NULL DEFAULT now()\n"
        ")"
    )


def migrations_sql(schema: str, applied: tuple[int, ...] = ()) -> list[str]:
    """Our migrations not in `applied`, each followed by the row that records it."""
    quoted = quote_ident(schema)
    statements = [f"CREATE SCHEMA IF NOT EXISTS {quoted}", tracking_table_sql(quoted)]
    for migration in MIGRATIONS:
        if migration.version in applied:
            continue
        name = migration.name.replace("'", "''")
        statements.append(migration.sql.format(schema=quoted).strip())
        statements.append(
            f"INSERT INTO {quoted}.soniq_migrations (version, name) VALUES ({migration.version}, '{name}')"
        )
    return statements


def legacy_upgrade_sql(schema: str) -> tuple[list[str], list[str]]:
    """The 0.1.0 upgrade: statements before the Python step, and after it."""
    target = "\n".join(migration.sql for migration in MIGRATIONS)
    before = legacy_010.move_aside_sql(schema) + migrations_sql(schema) + legacy_010.copy_sql(schema, target)
    return before, [legacy_010.drop_aside_sql(schema)]


async def setup_schema(
    connection: asyncpg.Connection, schema: str, params: SetupSchemaParams, *, explicit: bool
) -> SchemaReport:
    """Bring `schema` to this release's schema; `explicit` is False for first use by a worker or producer,
    which never upgrades a 0.1.0 schema."""
    transaction = connection.transaction()
    await transaction.start()
    try:
        report = await _run(connection, schema, params, explicit=explicit)
    except BaseException:
        await transaction.rollback()
        raise
    if params.dry_run:
        await transaction.rollback()
    else:
        await transaction.commit()
    return report


async def _run(
    connection: asyncpg.Connection, schema: str, params: SetupSchemaParams, *, explicit: bool
) -> SchemaReport:
    await connection.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", MIGRATION_LOCK, schema)
    family, applied = await legacy_010.detect(connection, schema, LATEST_VERSION)
    if family in (SchemaFamily.NEWER, SchemaFamily.FOREIGN):
        raise legacy_010.refusal(family, schema, applied, LATEST_VERSION)
    pending = tuple(m.version for m in MIGRATIONS if m.version not in applied)
    if family is SchemaFamily.LEGACY_010:
        if not explicit:
            raise legacy_010.needs_setup(schema)
        if not params.force:
            await legacy_010.check_workers(connection, schema)
        before, after = legacy_upgrade_sql(schema)
        report = SchemaReport(
            family=family.value,
            applied=applied,
            pending=pending,
            statements=(*before, legacy_010.unique_keys_note(schema), *after),
            upgraded_from=family.value,
            dry_run=params.dry_run,
        )
        if params.dry_run:
            return report
        step = ""
        try:
            for step in before:
                await connection.execute(step)
            step = legacy_010.unique_keys_note(schema)
            await legacy_010.carry_unique_keys(connection, schema)
            for step in after:
                await connection.execute(step)
        except asyncpg.PostgresError as exc:
            first_line = step.strip().splitlines()[0] if step.strip() else "?"
            raise SchemaStateError(
                family,
                f"upgrading the soniq 0.1.0 schema {schema!r} failed at `{first_line[:100]}` "
                f"({type(exc).__name__}: {exc}); the transaction was rolled back, so the 0.1.0 schema and "
                "every row are as they were. Fix the row it names (or report it) and run `soniq setup` again",
            ) from exc
        return report
    statements = migrations_sql(schema, applied) if pending else []
    report = SchemaReport(
        family=family.value, applied=applied, pending=pending, statements=tuple(statements), dry_run=params.dry_run
    )
    if not params.dry_run:
        for statement in statements:
            await connection.execute(statement)
    return report
