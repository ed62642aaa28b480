"""soniq-minimal: a Soniq backend that fills only `QueueStore`, written as a third party would."""

from __future__ import annotations

from soniq_minimal.backend import MinimalBackend

__version__ = "0.1.0"
__all__ = ["MinimalBackend"]
