"""Which parts of the suite apply to a backend: decided here, and only here.

The URL form asks before collection ends (and deselects what does not
apply, so it is not reported as a skip); the class form cannot know the
backend until its fixtures run, so it asks the same question there and
skips with the same reason. Imports nothing heavy: the plugin calls it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from soniq.backend import BackendCapabilities

WORKER_PROCESS_MARK = "soniq_worker_process"
"""The marker on every real-process shutdown scenario."""


def worker_processes_excluded(capabilities: BackendCapabilities, backend_name: str) -> str | None:
    """Why the real-process scenarios do not apply to this backend, or None when they do.

    A `soniq worker` process must reach the same rows as the test, which an
    in-process store cannot offer; a store that several processes can share
    must pass them.
    """
    if capabilities.shared_across_processes:
        return None
    return (
        f"the real-process shutdown scenarios do not apply to {backend_name}: it is not shared across processes "
        "(capabilities.shared_across_processes is False)"
    )
