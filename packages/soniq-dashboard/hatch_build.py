"""Build hook: fetch the pinned uPlot release the dashboard's charts draw with, from the npm registry.

uPlot's files are never committed to this repository. Every build (the wheel, the sdist, and the
editable install ``pip install -e`` makes) first makes sure ``src/soniq_dashboard/static/vendor/uplot/``
holds them; when any is missing or was fetched for another pin, this runs ``npm pack uplot@VERSION``
in a temporary folder, checks the tarball against the pinned sha512 integrity, and copies out the
three files the dashboard serves. An sdist carries the fetched files, so a wheel built from it needs
no npm. ``SOURCE`` beside them records what was fetched; the hook compares it with the pin.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGE = "uplot"
VERSION = "1.6.32"
# `npm view uplot@1.6.32 dist.integrity`: the registry's sha512 of the release tarball.
INTEGRITY = "sha512-KIMVnG68zvu5XXUbC4LQEPnhwOxBuLyW1AHtpm6IKTXImkbLgkMy+jabjLgSLMasNuGGzQm/ep3tOkyTxpiQIw=="
# tarball member -> file name in the vendor folder
FILES = {
    "package/dist/uPlot.iife.min.js": "uPlot.iife.min.js",
    "package/dist/uPlot.min.css": "uPlot.min.css",
    "package/LICENSE": "LICENSE",
}
VENDOR = Path("src/soniq_dashboard/static/vendor/uplot")
STAMP = "SOURCE"
NPM_TIMEOUT = 300


class VendorFetchError(RuntimeError):
    pass


def stamp_text() -> str:
    return f"{PACKAGE}@{VERSION} from the npm registry, {INTEGRITY}\n"


def is_current(vendor: Path) -> bool:
    """Every file is there, fetched for this pin."""
    stamp = vendor / STAMP
    if not stamp.is_file() or stamp.read_text(encoding="utf-8") != stamp_text():
        return False
    return all((vendor / name).is_file() for name in FILES.values())


def integrity_of(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode("ascii")


def npm_pack(workdir: Path) -> bytes:
    """The release tarball's bytes, as `npm pack` downloads it (through the user's npm config and cache)."""
    npm = shutil.which("npm")
    if npm is None:
        raise VendorFetchError(
            f"building soniq-dashboard needs npm to fetch {PACKAGE}@{VERSION} (the charts' library) from the "
            "npm registry, and npm is not on PATH: install Node.js with npm (Debian: apt-get install npm), "
            "or build from an sdist, which carries the files"
        )
    spec = f"{PACKAGE}@{VERSION}"
    try:
        done = subprocess.run(
            [npm, "pack", spec, "--silent", "--ignore-scripts"],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise VendorFetchError(f"`npm pack {spec}` did not finish within {NPM_TIMEOUT}s") from exc
    tarballs = sorted(workdir.glob("*.tgz"))
    if done.returncode != 0 or len(tarballs) != 1:
        raise VendorFetchError(f"`npm pack {spec}` failed (exit {done.returncode}):\n{done.stderr.strip()}")
    return tarballs[0].read_bytes()


def extract(tarball: bytes, vendor: Path) -> None:
    """Copy the wanted members out (read by name: nothing else in the archive touches the disk)."""
    found = integrity_of(tarball)
    if found != INTEGRITY:
        raise VendorFetchError(f"{PACKAGE}@{VERSION}: the tarball's integrity is {found}, the pin is {INTEGRITY}")
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        contents: dict[str, bytes] = {}
        for member, name in FILES.items():
            try:
                handle = archive.extractfile(member)
            except KeyError:
                handle = None
            if handle is None:
                raise VendorFetchError(f"{PACKAGE}@{VERSION}: the tarball has no file {member}")
            contents[name] = handle.read()
    vendor.mkdir(parents=True, exist_ok=True)
    for name, data in {**contents, STAMP: stamp_text().encode("utf-8")}.items():
        partial = vendor / f".{name}.partial"
        partial.write_bytes(data)
        os.replace(partial, vendor / name)


def ensure_vendor(root: Path) -> Path:
    """The vendor folder under `root`, fetched first when it is not current."""
    vendor = root / VENDOR
    if not is_current(vendor):
        with tempfile.TemporaryDirectory(prefix="soniq-uplot-") as tmp:
            extract(npm_pack(Path(tmp)), vendor)
    return vendor


class UPlotBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Runs before every target's build; pyproject.toml lists the files as artifacts of both targets."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        ensure_vendor(Path(self.root))
