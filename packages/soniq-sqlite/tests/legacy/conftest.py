"""A SQLite file soniq 0.1.0 itself set up and used; the 0.1.0 virtualenv comes from
`soniq_contract_tests.legacy_venv`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from soniq_contract_tests.legacy_venv import legacy_python

__all__ = ["legacy_python"]

POPULATE = Path(__file__).with_name("populate_010.py")


@pytest.fixture
def legacy_010_file(legacy_python: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A file soniq 0.1.0 set up and used, with the ids of the rows it left."""
    path = tmp_path / "legacy.db"
    done = subprocess.run(
        [str(legacy_python), str(POPULATE), str(path)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ids: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return path, ids
