"""Pin the workspace's test environment, or check that the pins are current.

``bash scripts/lock`` resolves the development environment afresh (every workspace member editable, the
test tools of requirements-test.txt) in a throwaway virtualenv, at the newest versions the declared ranges
allow, and writes the exact versions to requirements-test.lock. scripts/bootstrap installs with that file as
pip constraints, so every machine runs the suite on the same versions, whatever was released since.

``bash scripts/lock --check [VENV]`` fails when the lock no longer matches its inputs (requirements-test.txt,
requirements-workspace.txt, and each member's declared dependencies), or when VENV holds a third-party package
at a version the lock does not pin. The runtime ranges of the distributions stay wide; scripts/test-newest
runs the suite on the newest versions they allow, apart from the pinned run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements-test.lock"
WORKSPACE_REQUIREMENTS = ROOT / "requirements-workspace.txt"
TEST_REQUIREMENTS = ROOT / "requirements-test.txt"
DJANGO_MEMBER = "packages/soniq-django"
FIELD = re.compile(r"^# (?P<key>inputs-sha256|python): (?P<value>.*)$")
HEADER = """\
# The workspace's test environment, pinned. scripts/bootstrap installs with `-c requirements-test.lock`.
# Made by `bash scripts/lock` (refresh on purpose; commit the result); `bash scripts/lock --check` fails when
# its inputs changed since (the digest below), and scripts/test runs it. Do not edit by hand.
"""


def members() -> list[str]:
    """The workspace members, as hatch.toml lists them (the one list of them)."""
    config = tomllib.loads((ROOT / "hatch.toml").read_text())
    found: list[str] = config["envs"]["default"]["workspace"]["members"]
    return found


def inputs_digest() -> str:
    """A digest of everything that decides what the environment resolves to, and nothing else."""
    declared: dict[str, object] = {}
    for member in members():
        project = tomllib.loads((ROOT / member / "pyproject.toml").read_text())["project"]
        declared[member] = {
            "requires-python": project.get("requires-python"),
            "dependencies": sorted(project.get("dependencies", [])),
            "optional-dependencies": {k: sorted(v) for k, v in project.get("optional-dependencies", {}).items()},
        }
    for path in (TEST_REQUIREMENTS, WORKSPACE_REQUIREMENTS):
        lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
        declared[path.name] = [line for line in lines if line]
    blob = json.dumps(declared, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def parse_lock(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """(header fields, pins by normalized name) of a lock file's text."""
    fields: dict[str, str] = {}
    pins: dict[str, str] = {}
    for line in text.splitlines():
        field = FIELD.match(line)
        if field:
            fields[field["key"]] = field["value"].strip()
        elif line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[normalize(name)] = version.strip()
    return fields, pins


def normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def frozen(python: Path) -> dict[str, str]:
    """The third-party packages (name -> version) installed for this interpreter, editable ones left out."""
    out = subprocess.run(
        [str(python), "-m", "pip", "freeze", "--all", "--exclude-editable", "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            found[normalize(name)] = version.strip()
    for tool in ("setuptools", "wheel"):  # present or not depending on how the venv was made
        found.pop(tool, None)
    return found


def python_minor(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def make() -> int:
    with tempfile.TemporaryDirectory(prefix="soniq-lock-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True, cwd=ROOT)
        extra = ["-e", DJANGO_MEMBER] if sys.version_info >= (3, 12) else []
        subprocess.run([*pip, "-r", str(WORKSPACE_REQUIREMENTS), *extra], check=True, cwd=ROOT)
        pins = frozen(python)
    lines = [HEADER, f"# inputs-sha256: {inputs_digest()}\n", f"# python: {python_minor(Path(sys.executable))}\n"]
    lines += [f"{name}=={version}\n" for name, version in sorted(pins.items())]
    LOCK.write_text("".join(lines))
    print(f"wrote {LOCK.relative_to(ROOT)}: {len(pins)} pins on Python {python_minor(Path(sys.executable))}")
    return 0


def newer(venv: Path) -> int:
    """Say which packages VENV holds at other versions than the lock pins (what a refresh would change)."""
    _, pins = parse_lock(LOCK.read_text())
    changed = [
        f"{name} {pins.get(name, 'not pinned')} -> {version}"
        for name, version in sorted(frozen(venv / "bin" / "python").items())
        if pins.get(name) != version
    ]
    print("differs from the lock: " + ", ".join(changed) if changed else "the lock pins these very versions")
    return 0


def check(venv: Path | None) -> int:
    if not LOCK.exists():
        print("requirements-test.lock is missing: run `bash scripts/lock` and commit it")
        return 1
    fields, pins = parse_lock(LOCK.read_text())
    problems: list[str] = []
    if fields.get("inputs-sha256") != inputs_digest():
        problems.append(
            "its inputs changed (requirements-test.txt, requirements-workspace.txt or a distribution's dependencies)"
        )
    if venv is not None:
        python = venv / "bin" / "python"
        same_python = python_minor(python) == fields.get("python")
        for name, version in sorted(frozen(python).items()):
            pinned = pins.get(name)
            if pinned is None:
                if same_python:
                    problems.append(f"{venv.name} has {name}=={version}, which the lock does not pin")
            elif pinned != version:
                problems.append(f"{venv.name} has {name}=={version}, the lock pins {pinned}")
    if problems:
        print("requirements-test.lock is not current: " + "; ".join(problems))
        print("refresh it on purpose with `bash scripts/lock`, review the diff, and commit it")
        return 1
    print(f"requirements-test.lock is current ({len(pins)} pins, Python {fields.get('python')})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when the lock is not current")
    parser.add_argument("--newer", action="store_true", help="say where VENV's versions differ from the lock")
    parser.add_argument("venv", nargs="?", type=Path, help="with --check: a virtualenv that must match the lock")
    args = parser.parse_args()
    if args.newer:
        if args.venv is None:
            parser.error("--newer needs VENV")
        return newer(args.venv)
    return check(args.venv) if args.check else make()


if __name__ == "__main__":
    sys.exit(main())
