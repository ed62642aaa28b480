"""soniq-redis is written the way a third party would write a backend: it may
use only soniq-core's public names. This test fails the build when any module
of soniq_redis imports, or reaches through an attribute, anything of `soniq`
whose name starts with an underscore."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import soniq_redis

PACKAGE_DIR = Path(soniq_redis.__file__).parent


def _is_soniq(module: str) -> bool:
    return module == "soniq" or module.startswith("soniq.")


def _private_segments(dotted: str) -> list[str]:
    return [part for part in dotted.split(".") if part.startswith("_")]


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def private_uses(source: str, filename: str = "<source>") -> list[str]:
    """Every use of a private soniq name in `source`, as ``line: what``."""
    tree = ast.parse(source, filename=filename)
    found: list[str] = []
    # Local names bound to a soniq module (``import soniq.records as r``), mapped to its path.
    soniq_aliases: dict[str, str] = {}

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _is_soniq(alias.name):
                    continue
                if _private_segments(alias.name):
                    found.append(f"{node.lineno}: import {alias.name}")
                if alias.asname:
                    soniq_aliases[alias.asname] = alias.name
                else:
                    soniq_aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _is_soniq(node.module):
            if _private_segments(node.module):
                found.append(f"{node.lineno}: from {node.module} import ...")
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                else:
                    soniq_aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Call):
            callee = _dotted(node.func) or ""
            if callee.split(".")[-1] in ("import_module", "__import__") and node.args:
                first = node.args[0]
                named = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
                if _is_soniq(named) and _private_segments(named):
                    found.append(f"{node.lineno}: {callee}({named!r})")

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted is None:
                continue
            root, _, rest = dotted.partition(".")
            if root in soniq_aliases and rest and _private_segments(rest):
                found.append(f"{node.lineno}: {soniq_aliases[root]}.{rest}")
    return sorted(set(found))


def test_soniq_redis_uses_only_public_soniq_names() -> None:
    modules = sorted(PACKAGE_DIR.rglob("*.py"))
    assert modules, f"no modules found under {PACKAGE_DIR}"
    offences = {
        str(path.relative_to(PACKAGE_DIR)): uses
        for path in modules
        if (uses := private_uses(path.read_text(encoding="utf-8"), str(path)))
    }
    assert offences == {}, f"soniq_redis uses private soniq-core names: {offences}"


def test_soniq_redis_does_import_soniq_core() -> None:
    # Guards the check above against passing because it found nothing to look at.
    imported = set()
    for path in PACKAGE_DIR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and _is_soniq(node.module):
                imported.add(node.module)
    assert {"soniq.backend", "soniq.params", "soniq.records", "soniq.errors"} <= imported


def test_soniq_redis_stores_recovery_decisions_and_never_makes_them() -> None:
    # Core decides each orphaned row's fate (soniq.rescue); a backend that
    # imported the decision could quietly start deciding again.
    found = []
    for path in PACKAGE_DIR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            found += [f"{path.name}:{node.lineno}" for name in names if name == "soniq.rescue"]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        "from soniq._internal import thing",
        "from soniq.worker._loop import run",
        "from soniq.records import _decode",
        "from soniq import _registry",
        "import soniq._internal",
        "import soniq._internal as internal",
        "import soniq\nsoniq.records._decode(1)",
        "import soniq.records as r\nr._decode(1)",
        "from soniq import records\nrecords._decode(1)",
        "from soniq.backend import Backend\nBackend._private_of_a_class",
        "import importlib\nimportlib.import_module('soniq._internal')",
    ],
)
def test_the_check_catches_private_uses(source: str) -> None:
    assert private_uses(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "from soniq.records import JobRecord",
        "from soniq_redis._x import y",
        "import soniq\nsoniq.records.JobRecord",
        "from soniq.backend import Backend\nBackend.capabilities",
        "from . import _sibling",
        "import redis\nredis._private",
    ],
)
def test_the_check_allows_public_uses(source: str) -> None:
    assert private_uses(source) == []
