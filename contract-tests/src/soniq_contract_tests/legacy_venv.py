"""A real soniq 0.1.0 in a throwaway virtualenv, for the backends' 0.1.0 upgrade tests.

The virtualenv is built once per Python version under the temp dir (keyed by the 0.1.0
version, guarded by a file lock so parallel test workers build it once) and reused by
later runs. Without a reachable package index the tests skip, unless CI=true.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

LEGACY_VERSION = "0.1.0"


def skip_or_fail(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def legacy_venv_python() -> Path:
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
                skip_or_fail(
                    f"could not install soniq=={LEGACY_VERSION} from the package index into {venv} "
                    f"(is the index reachable?): {install.stderr.strip()[-400:]}"
                )
            (venv / "ready").write_text("ok\n")
    return python


@pytest.fixture(scope="session")
def legacy_python() -> Path:
    """The interpreter of a virtualenv with soniq==0.1.0 installed (built once, then reused)."""
    return legacy_venv_python()
