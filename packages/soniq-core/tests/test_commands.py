"""Subcommands from the ``soniq.commands`` entry points, installed as a real distribution on the path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = """
import argparse

def add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--greeting", default="hello")
    parser.set_defaults(func=lambda args: print(args.greeting, args.database_url) or 0)

add.help = "say hello"
"""


def install_plugin(where: Path, module_body: str, value: str = "fakecmd_plugin:add") -> None:
    (where / "fakecmd_plugin.py").write_text(module_body)
    info = where / "fakecmd-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakecmd\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(f"[soniq.commands]\nhello = {value}\nworker = {value}\n")


def soniq(*args: str, path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env["SONIQ_OBSERVERS"] = ""
    env["PYTHONPATH"] = os.pathsep.join([str(path), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "soniq", *args], capture_output=True, text=True, timeout=60, cwd=path, env=env
    )


@pytest.fixture
def plugin_path(tmp_path: Path) -> Path:
    install_plugin(tmp_path, PLUGIN)
    return tmp_path


def test_an_installed_command_runs_with_the_common_options(plugin_path: Path) -> None:
    result = soniq("hello", "--greeting", "hi", "--database-url", "memory://", path=plugin_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "hi memory://"


def test_help_lists_the_command_without_importing_it(tmp_path: Path) -> None:
    install_plugin(tmp_path, "raise RuntimeError('imported although another command ran')\n")
    result = soniq("--help", path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "hello" in result.stdout
    assert "from fakecmd 1.2.3" in result.stdout
    # A built-in command runs without importing the plugin at all.
    assert soniq("backends", path=tmp_path).returncode == 0


def test_a_command_never_shadows_a_built_in_one(plugin_path: Path) -> None:
    result = soniq("worker", "--help", path=plugin_path)
    assert result.returncode == 0
    assert "--greeting" not in result.stdout
    assert "--concurrency" in result.stdout


def test_a_command_that_fails_to_import_is_one_line_naming_the_group(tmp_path: Path) -> None:
    install_plugin(tmp_path, "raise ImportError('missing web stack')\n")
    result = soniq("hello", path=tmp_path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "soniq.commands" in result.stderr
    assert "missing web stack" in result.stderr


def test_backends_lists_commands(plugin_path: Path) -> None:
    result = soniq("backends", path=plugin_path)
    assert result.returncode == 0, result.stderr
    assert "commands (soniq.commands):" in result.stdout
    assert "hello" in result.stdout
    assert "fakecmd 1.2.3" in result.stdout
