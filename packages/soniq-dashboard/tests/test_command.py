"""`soniq dashboard` as an operator runs it: what it says when it cannot serve."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dash_harness import free_port

from soniq.cli import main


def _env_without_a_url() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env["SONIQ_OBSERVERS"] = ""
    return env


def test_without_a_url_or_a_database_file_it_refuses_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "soniq", "dashboard", "--port", str(free_port())],
        cwd=tmp_path,
        env=_env_without_a_url(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("soniq: error: no database URL given")
    assert "--database-url" in lines[0]
    assert not (tmp_path / "soniq.db").exists()  # a read-only screen creates no database


def test_without_the_sqlite_backend_it_refuses_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import soniq.discovery as discovery

    (tmp_path / "soniq.db").touch()  # the default file is there; its backend package is not
    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k.startswith("SONIQ_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SONIQ_OBSERVERS", "")
    installed = discovery._entry_points

    def without_sqlite(group: str) -> list[Any]:
        # A PostgreSQL-only install: nothing serves the default URL's sqlite scheme.
        return [ep for ep in installed(group) if not (group == discovery.BACKENDS_GROUP and ep.name == "sqlite")]

    monkeypatch.setattr(discovery, "_entry_points", without_sqlite)

    code = main(["dashboard", "--port", str(free_port())])

    out, err = capsys.readouterr()
    assert code == 1
    assert err.splitlines() == [err.strip()], err
    assert err.startswith("soniq: error: no Soniq backend is installed for the URL scheme 'sqlite'")
    assert "pip install soniq-sqlite" in err
    assert "Traceback" not in out + err
