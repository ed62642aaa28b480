"""The build ships uPlot: the hook fetches the pinned release, the sdist carries it, the wheel has it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent
VENDOR_FILES = ("uPlot.iife.min.js", "uPlot.min.css", "LICENSE", "SOURCE")

pytestmark = pytest.mark.slow


def build(args: list[str], *, path: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m build`` (an isolated build environment with hatchling), with `path` as PATH when given."""
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "build", *args], capture_output=True, text=True, env=env, timeout=600, check=False
    )


def without_npm(tmp_path: Path) -> str:
    """A PATH with nothing on it: no npm (the build runs pip through the interpreter's own path)."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    return str(empty)


def test_the_sdist_carries_uplot_and_the_wheel_built_from_it_without_npm_has_it(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    sdist_run = build(["--sdist", "--outdir", str(out), str(PACKAGE)])
    assert sdist_run.returncode == 0, sdist_run.stdout + sdist_run.stderr
    (sdist,) = out.glob("soniq_dashboard-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    root = sdist.name.removesuffix(".tar.gz")
    for name in VENDOR_FILES:
        assert f"{root}/src/soniq_dashboard/static/vendor/uplot/{name}" in names, name
    assert f"{root}/hatch_build.py" in names

    # From the sdist, no npm is needed: the files are in it.
    wheel_run = build(["--wheel", "--outdir", str(out), str(sdist)], path=without_npm(tmp_path))
    assert wheel_run.returncode == 0, wheel_run.stdout + wheel_run.stderr
    (wheel,) = out.glob("soniq_dashboard-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        files = set(archive.namelist())
        source = archive.read("soniq_dashboard/static/vendor/uplot/SOURCE").decode()
        script = archive.read("soniq_dashboard/static/vendor/uplot/uPlot.iife.min.js")
    for name in VENDOR_FILES:
        assert f"soniq_dashboard/static/vendor/uplot/{name}" in files, name
    assert "soniq_dashboard/static/charts.js" in files
    assert "soniq_dashboard/templates/charts.html" in files
    assert not [f for f in files if f.endswith(".gitignore")]
    assert source.startswith("uplot@1.6.32 from the npm registry, sha512-")
    assert b"uPlot" in script


def test_a_checkout_without_uplot_and_without_npm_fails_with_one_clear_error(tmp_path: Path) -> None:
    checkout = tmp_path / "soniq-dashboard"
    checkout.mkdir()
    for name in ("pyproject.toml", "hatch_build.py", "README.md", "CHANGELOG.md"):
        shutil.copy(PACKAGE / name, checkout / name)
    shutil.copytree(
        PACKAGE / "src",
        checkout / "src",
        ignore=shutil.ignore_patterns("uplot", "__pycache__"),
    )
    run = build(["--sdist", "--outdir", str(tmp_path / "dist"), str(checkout)], path=without_npm(tmp_path))
    assert run.returncode != 0
    output = run.stdout + run.stderr
    assert "building soniq-dashboard needs npm to fetch uplot@1.6.32" in output, output
    assert not list(tmp_path.glob("dist/*.tar.gz"))
