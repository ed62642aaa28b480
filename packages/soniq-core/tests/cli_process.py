"""Run the `soniq` command in a child process as a user would: none of the caller's SONIQ_* variables,
no installed observers, no terminal on standard input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_soniq(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    full["SONIQ_OBSERVERS"] = ""
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "soniq", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=full,
        stdin=subprocess.DEVNULL,
    )


def succeeded(result: subprocess.CompletedProcess[str]) -> str:
    """The command's standard output, once it exited 0 (else its standard error is the failure)."""
    assert result.returncode == 0, result.stderr
    return result.stdout
