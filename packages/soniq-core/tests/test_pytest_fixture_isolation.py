"""The `soniq_app` fixture with ``--soniq-app-url`` gives each test a store of its own.

A user's test suite runs in a child pytest on SQLite and on PostgreSQL: the first test enqueues a
job and leaves it, the second drains and must find nothing (on a shared store it would run the
first test's job). A third test checks the namespace is gone after its test.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from soniq.testing.pytest_plugin import NAMESPACE_PREFIX

pytestmark = pytest.mark.timeout(180)

POSTGRES_URL = os.environ.get("SONIQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

USER_TESTS = """
import asyncio

from soniq import Soniq
from soniq.testing import drain


def register(app: Soniq) -> None:
    async def note(text: str) -> str:
        return text

    app.job(name="note")(note)


def test_a_enqueues_and_leaves_the_job(soniq_app: Soniq) -> None:
    register(soniq_app)

    async def body() -> None:
        await soniq_app.setup()
        await soniq_app.enqueue("note", args={"text": "left behind"})
        await soniq_app.close()

    asyncio.run(body())


def test_b_finds_nothing_to_drain(soniq_app: Soniq) -> None:
    register(soniq_app)

    async def body() -> list[object]:
        try:
            return await drain(soniq_app)
        finally:
            await soniq_app.close()

    assert asyncio.run(body()) == []


def test_c_runs_its_own_job(soniq_app: Soniq) -> None:
    register(soniq_app)

    async def body() -> list[object]:
        try:
            await soniq_app.setup()
            await soniq_app.enqueue("note", args={"text": "mine"})
            return await drain(soniq_app)
        finally:
            await soniq_app.close()

    assert asyncio.run(body()) == ["mine"]
"""


def run_user_suite(tmp_path: Path, url: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["soniq.testing.pytest_plugin"]\n')
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env["SONIQ_OBSERVERS"] = ""
    return subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q", "-n", "0"),
            *("--soniq-app-url", url, "test_user.py"),
        ],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_each_test_gets_its_own_namespace_on_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    ran = run_user_suite(tmp_path, f"sqlite:///{db}")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "3 passed" in ran.stdout
    assert sorted(p.name for p in tmp_path.glob("shared*")) == [], "the namespaces' files were not removed"


def test_each_test_gets_its_own_namespace_on_postgres(tmp_path: Path, postgres_url: str) -> None:
    before = asyncio.run(schemas_named_like_the_fixture(postgres_url))
    ran = run_user_suite(tmp_path, postgres_url)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "3 passed" in ran.stdout
    assert asyncio.run(schemas_named_like_the_fixture(postgres_url)) - before == set(), (
        "a test's schema was not dropped"
    )


async def schemas_named_like_the_fixture(url: str) -> set[str]:
    conn = await asyncpg.connect(url)
    try:
        query = "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)"
        rows = await conn.fetch(query, NAMESPACE_PREFIX)
        return {str(row["nspname"]) for row in rows}
    finally:
        await conn.close()
