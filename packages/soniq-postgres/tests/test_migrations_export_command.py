"""``soniq migrations export`` (soniq-postgres' command) as a user runs it: the SQL it prints makes a
schema that `soniq migrate-status` calls current and a backend works on; the Alembic form is a module."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest

from soniq.params import ClaimJobsParams, EnqueueJobsParams
from soniq.records import NewJob
from soniq_postgres import MIGRATIONS, PostgresBackend


def soniq(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env["SONIQ_OBSERVERS"] = ""
    return subprocess.run(
        [sys.executable, "-m", "soniq", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.asyncio
async def test_the_exported_sql_makes_a_current_schema_a_backend_works_on(
    pg_url: str, namespace: str, tmp_path: Path, make_job: Callable[..., NewJob]
) -> None:
    url = f"{pg_url}?namespace={namespace}"
    exported = soniq("migrations", "export", "--sql", "--database-url", url, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert f'CREATE SCHEMA IF NOT EXISTS "{namespace}"' in exported.stdout

    connection = await asyncpg.connect(pg_url)
    backend = PostgresBackend.from_url(pg_url, namespace=namespace)
    try:
        await connection.execute(exported.stdout)
        status = soniq("migrate-status", "--database-url", url, cwd=tmp_path)
        assert status.returncode == 0, status.stderr
        assert "current" in status.stdout.lower(), status.stdout
        versions = await connection.fetchval(
            f'SELECT array_agg(version ORDER BY version) FROM "{namespace}".soniq_migrations'
        )
        assert list(versions) == [migration.version for migration in MIGRATIONS]

        await backend.connect()
        job = make_job()
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
        claimed = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=5, mark_started=True))
        assert [row.id for row in claimed] == [job.id]
    finally:
        await backend.close()
        await connection.execute(f'DROP SCHEMA IF EXISTS "{namespace}" CASCADE')
        await connection.close()


def test_from_prints_only_the_later_migrations_and_alembic_is_an_importable_module(tmp_path: Path) -> None:
    everything = soniq("migrations", "export", "--sql", cwd=tmp_path)
    later = soniq("migrations", "export", "--sql", "--from", str(MIGRATIONS[-2].version), cwd=tmp_path)
    assert everything.returncode == 0, everything.stderr
    assert later.returncode == 0, later.stderr
    last = MIGRATIONS[-1]
    assert f"VALUES ({last.version}, " in later.stdout
    assert f"VALUES ({MIGRATIONS[-2].version}, " not in later.stdout
    assert len(later.stdout) < len(everything.stdout)

    revision = soniq("migrations", "export", "--alembic", "--down-revision", "abc123", cwd=tmp_path)
    assert revision.returncode == 0, revision.stderr
    tree = ast.parse(revision.stdout)
    assigned = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    assert (assigned["revision"], assigned["down_revision"]) == ("soniq_schema", "abc123")
    upgrade = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "upgrade")
    # The schema, the tracking table, then each migration and the row that records it.
    assert len(upgrade.body) == 2 + 2 * len(MIGRATIONS)
    # The revision runs exactly the plain SQL, with ":name" (a bind parameter under sqlalchemy.text()) escaped.
    executed = [ast.literal_eval(call.value.args[0]) for call in upgrade.body]  # type: ignore[attr-defined]
    unescaped = "".join(sql.replace("\\:", ":").rstrip().rstrip(";") + ";\n\n" for sql in executed)
    assert unescaped == everything.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--sql", "--database-url", "sqlite:///x.db"], "prints PostgreSQL SQL"),
        (["--sql", "--from", "2", "--upgrade-from-0.1.0"], "cannot be combined"),
        (["--sql", "--from", "-1"], "--from must be a migration version"),
    ],
)
def test_a_bad_combination_is_one_error_line(tmp_path: Path, args: list[str], fragment: str) -> None:
    result = soniq("migrations", "export", *args, cwd=tmp_path)
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("soniq: error:"), line
    assert fragment in line
