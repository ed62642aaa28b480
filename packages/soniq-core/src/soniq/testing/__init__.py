"""Helpers for testing code that uses Soniq: ``from soniq.testing import make_app, drain, wait_until``.

- `make_app(**settings)`: a `Soniq` on a fresh in-memory store (or on the store
  `use_backend` points the tests at).
- `drain(app)`: run every job that is due now, in the test's event loop, and return
  the results of those that succeeded, in the order they ran.
- `wait_until(predicate, timeout=...)`: wait for a condition with a deadline instead of
  sleeping and hoping.
- `MemoryBackend`: the in-memory backend (from soniq-memory), with inspectable state.
  ``soniq.testing.memory_backend.MemoryBackend`` (soniq 0.1.0's path) is the same class.
- `soniq.testing.pytest_plugin`: fixtures; enable with ``pytest_plugins = ["soniq.testing.pytest_plugin"]``.
"""

from __future__ import annotations

from typing import Any

from soniq.testing.helpers import drain, make_app, use_backend, wait_until

__all__ = ["MemoryBackend", "drain", "make_app", "use_backend", "wait_until"]


def __getattr__(name: str) -> Any:
    # Core never imports a backend by name: the memory backend is found through its entry point.
    if name == "MemoryBackend":
        from soniq.discovery import backend_class_for

        return backend_class_for("memory://")
    raise AttributeError(f"module 'soniq.testing' has no attribute {name!r}")
