"""A real soniq 0.1.0 in a throwaway virtualenv, and a database of its own for each test.

The virtualenv is built once per Python version under the temp dir (keyed by the 0.1.0
version, guarded by a file lock so parallel test workers build it once) and reused by
later runs. Without a reachable package index the tests skip, unless CI=true.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import pytest_asyncio

LEGACY_VERSION = "0.1.0"
POPULATE = Path(__file__).with_name("populate_010.py")


def _skip_or_fail(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def legacy_python() -> Path:
    """The interpreter of a virtualenv with soniq==0.1.0 installed from the package index."""
    tag = f"soniq-{LEGACY_VERSION}-py{sys.version_info.major}{sys.version_info.minor}"
    root = Path(tempfile.gettempdir()) / "soniq-legacy-venvs"
    root.mkdir(exist_ok=True)
    venv = root / tag
    python = venv / "bin" / "python"
    with open(root / f"{tag}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "ready").exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            install = subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", f"soniq=={LEGACY_VERSION}", "aiosqlite"],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if install.returncode != 0:
                _skip_or_fail(
                    f"could not install soniq=={LEGACY_VERSION} from the package index into {venv} "
                    f"(is the index reachable?): {install.stderr.strip()[-400:]}"
                )
            (venv / "ready").write_text("ok\n")
    return python


@pytest_asyncio.fixture
async def legacy_db(pg_url: str) -> AsyncIterator[str]:
    """The URL of a new, empty database on the test server, dropped afterwards."""
    name = f"soniq_upgrade_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pg_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    parts = urlsplit(pg_url)
    yield urlunsplit(parts._replace(path=f"/{name}"))
    admin = await asyncpg.connect(pg_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def populate(legacy_python: Path, url: str) -> dict[str, str]:
    """Run 0.1.0's own setup, worker and enqueues against `url`; the ids of the rows it left."""
    done = subprocess.run(
        [str(legacy_python), str(POPULATE), url],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ids: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return ids


@pytest.fixture
def legacy_010_db(legacy_python: Path, legacy_db: str) -> tuple[str, dict[str, str]]:
    """A database soniq 0.1.0 set up and used, with the ids of the rows it left."""
    return legacy_db, populate(legacy_python, legacy_db)


async def fetch(url: str, sql: str, *args: object) -> list[asyncpg.Record]:
    connection = await asyncpg.connect(url)
    try:
        return list(await connection.fetch(sql, *args))
    finally:
        await connection.close()


def run_fetch(url: str, sql: str, *args: object) -> list[asyncpg.Record]:
    return asyncio.run(fetch(url, sql, *args))
