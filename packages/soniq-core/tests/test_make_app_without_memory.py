"""`soniq.testing.make_app()` in an environment without soniq-memory: one clear error, at the call.

The child interpreter is isolated (``-I -S``) and sees soniq-core's source and its one dependency
(cronsim) only, so no backend's entry point is installed: a real environment that lacks soniq-memory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cronsim

import soniq


def run_isolated(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "soniq").symlink_to(Path(soniq.__file__).parent)
    (site / "cronsim").symlink_to(Path(cronsim.__file__).parent)
    program = f"import sys; sys.path.insert(0, {str(site)!r})\n{code}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", program], capture_output=True, text=True, timeout=60, env=env
    )


def test_make_app_without_soniq_memory_says_to_install_it(tmp_path: Path) -> None:
    result = run_isolated(tmp_path, "from soniq.testing import make_app\nmake_app()")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("soniq.errors.BackendNotFoundError: soniq.testing.make_app() builds its app on the")
    assert "pip install soniq-memory" in last
    assert "use_backend" in last


def test_make_app_on_another_store_does_not_need_soniq_memory(tmp_path: Path) -> None:
    code = (
        "from soniq.testing import make_app\napp = make_app(database_url='sqlite:///x.db')\nprint(type(app).__name__)"
    )
    result = run_isolated(tmp_path, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Soniq"
