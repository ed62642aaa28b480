"""soniq-memory: an in-process Soniq backend for tests and examples, with inspectable state."""

from __future__ import annotations

from soniq_memory.backend import MemoryBackend

__all__ = ["MemoryBackend"]
__version__ = "0.2.0"
