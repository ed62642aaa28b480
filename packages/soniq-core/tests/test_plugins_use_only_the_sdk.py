"""Every plugin in this repository is written the way a third party would write one: of soniq-core it
imports only the SDKs (`soniq`, `soniq.backend`, `soniq.observers`, `soniq.errors`), and of those only
public names. The check parses each module with `ast`, so an import inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PLUGIN_SOURCES = sorted(
    [path for path in (ROOT / "packages").glob("*/src/*") if path.is_dir() and path.name != "soniq"]
    + [ROOT / "contract-tests" / "src" / "soniq_contract_tests", ROOT / "examples" / "minimal_backend" / "src"]
)
SDK_MODULES = ("soniq", "soniq.backend", "soniq.observers", "soniq.errors")
BACKENDS = ("soniq_memory", "soniq_sqlite", "soniq_postgres", "soniq_redis", "soniq_minimal")


def _is_soniq(module: str) -> bool:
    return module == "soniq" or module.startswith("soniq.")


def _in_sdk(module: str) -> bool:
    return module in SDK_MODULES or module.startswith("soniq.backend.")


def _private(dotted: str) -> bool:
    return any(part.startswith("_") for part in dotted.split("."))


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def offences(source: str, filename: str = "<source>") -> list[str]:
    """Each use of core outside the SDKs, or of a private name, as ``line: what``."""
    tree = ast.parse(source, filename=filename)
    found: list[str] = []
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _is_soniq(alias.name):
                    continue
                if not _in_sdk(alias.name) or _private(alias.name):
                    found.append(f"{node.lineno}: import {alias.name}")
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    aliases["soniq"] = "soniq"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _is_soniq(node.module):
            if not _in_sdk(node.module) or _private(node.module):
                found.append(f"{node.lineno}: from {node.module} import ...")
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                else:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Call):
            callee = _dotted(node.func) or ""
            first = node.args[0] if node.args else None
            named = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
            dynamic = callee.split(".")[-1] in ("import_module", "__import__") and _is_soniq(named)
            if dynamic and (not _in_sdk(named) or _private(named)):
                found.append(f"{node.lineno}: {callee}({named!r})")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            root, _, rest = (dotted or "").partition(".")
            if root in aliases and rest:
                target = f"{aliases[root]}.{rest}"
                if _private(rest) or (aliases[root] == "soniq" and not _attribute_in_sdk(rest)):
                    found.append(f"{node.lineno}: {target}")
    return sorted(set(found))


def _attribute_in_sdk(rest: str) -> bool:
    """``soniq.X...`` reached as an attribute: fine when X is a top-level name or an SDK module."""
    head = rest.split(".")[0]
    return head not in {"app", "worker", "cli", "params", "records", "settings", "limits", "rescue"}


@pytest.mark.parametrize("package", PLUGIN_SOURCES, ids=lambda path: path.name if path.name != "src" else "minimal")
def test_a_plugin_imports_only_the_sdks_public_names(package: Path) -> None:
    modules = sorted(package.rglob("*.py"))
    assert modules, f"no modules under {package}"
    found = {
        str(path.relative_to(ROOT)): uses
        for path in modules
        if (uses := offences(path.read_text(encoding="utf-8"), str(path)))
    }
    assert found == {}, f"imports from core outside soniq, soniq.backend, soniq.observers and soniq.errors: {found}"


def test_every_plugin_was_looked_at() -> None:
    names = {path.name for path in PLUGIN_SOURCES}
    assert {"soniq_dashboard", "soniq_django", "soniq_otel", "soniq_prometheus", "soniq_contract_tests"} <= names
    assert set(BACKENDS) - {"soniq_minimal"} <= names


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_backend_stores_recovery_decisions_and_never_makes_them(backend: str) -> None:
    # Core decides each orphaned row's fate; a backend that imported the decision could start deciding again.
    package = next(path for path in [*PLUGIN_SOURCES, *(p / backend for p in PLUGIN_SOURCES)] if path.name == backend)
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names]
        used = [node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)]
        assert "decide_rescue" not in imported + used, f"{path} decides a rescue itself"


@pytest.mark.parametrize(
    "source",
    [
        "from soniq._internal import thing",
        "from soniq.worker._loop import run",
        "from soniq.records import JobRecord",
        "from soniq.app import Soniq",
        "from soniq.backend import _hidden",
        "from soniq import _registry",
        "import soniq._internal",
        "import soniq.settings",
        "import soniq\nsoniq.records.JobRecord",
        "from soniq.backend import Backend\nBackend._private_of_a_class",
        "import importlib\nimportlib.import_module('soniq.app')",
    ],
)
def test_the_check_catches_what_is_outside_the_sdks(source: str) -> None:
    assert offences(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "from soniq import Soniq",
        "from soniq.backend import JobRecord, QueueStore",
        "from soniq.backend.rules import group_of",
        "from soniq.observers import WorkerState",
        "from soniq.errors import SoniqError",
        "from soniq_redis._x import y",
        "from soniq.backend import Backend\nBackend.capabilities",
        "import soniq\nsoniq.Soniq",
        "from . import _sibling",
        "import redis\nredis._private",
    ],
)
def test_the_check_allows_the_sdks(source: str) -> None:
    assert offences(source) == []
