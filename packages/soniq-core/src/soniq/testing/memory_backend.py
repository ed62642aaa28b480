"""soniq 0.1.0's module path for the in-memory backend: ``from soniq.testing.memory_backend import MemoryBackend``.

The backend itself is soniq-memory's (``soniq.testing.MemoryBackend`` is the same class). It is
found through its ``soniq.backends`` entry point, as every backend is, so importing this module
without soniq-memory installed fails at once with an `ImportError` that says to install it.
"""

from __future__ import annotations

from typing import Any

from soniq.discovery import backend_class_for
from soniq.errors import BackendLoadError, BackendNotFoundError

__all__ = ["MemoryBackend"]

try:
    MemoryBackend: Any = backend_class_for("memory://")
except (BackendNotFoundError, BackendLoadError) as exc:
    raise ImportError(
        "soniq.testing.memory_backend needs the soniq-memory distribution, which provides the in-memory "
        f"backend; install it with: pip install soniq-memory ({exc})",
        name="soniq_memory",
    ) from exc
