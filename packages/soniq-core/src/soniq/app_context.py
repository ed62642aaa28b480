"""`AppContext`: what the app's services (dead letters, waiting, the sync bridge, schedules, the
worker) use of their `Soniq`, and nothing else.

The app builds one and passes it to each service it makes, so no service sees the producer
or read API. Everything is read through getters, since an app changes under its services: it
may be pointed at another URL (`use_database_url`), given other settings or another registry
(the CLI's overrides, the pytest plugin), or gain observers after a service was made.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from soniq.backend import QueueStore
    from soniq.bus import ObservationBus
    from soniq.params import GroupLimit
    from soniq.registry import JobRegistry
    from soniq.scheduling.service import Scheduler
    from soniq.settings import Settings

__all__ = ["AppContext"]


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class AppContext:
    """One app's settings, registry, backend and bus, as its services see them."""

    get_registry: Callable[[], JobRegistry]
    get_settings: Callable[[], Settings]
    get_backend: Callable[[], QueueStore]
    """The backend, built from the URL the first time it is asked for; not connected."""
    get_bus: Callable[[], ObservationBus]
    connect: Callable[[], Awaitable[None]]
    connected_backend: Callable[[], Awaitable[QueueStore]]
    """The backend for the running loop, connected: the app's own, or the sync bridge's on its thread."""
    new_backend_instance: Callable[[], QueueStore | None]
    """Another unconnected backend on the same URL, or None where a second one would be another queue."""
    get_scheduler: Callable[[], Scheduler]
    get_sync_pool: Callable[[], concurrent.futures.ThreadPoolExecutor]
    """The thread pool plain ``def`` handlers run in."""
    group_limits: Callable[[], tuple[GroupLimit, ...]]
    """Every fleet-wide limit the app knows (the `queue_limits` setting's, then each job's own)."""

    @property
    def registry(self) -> JobRegistry:
        return self.get_registry()

    @property
    def settings(self) -> Settings:
        return self.get_settings()

    @property
    def backend(self) -> QueueStore:
        return self.get_backend()

    @property
    def bus(self) -> ObservationBus:
        return self.get_bus()

    @property
    def scheduler(self) -> Scheduler:
        return self.get_scheduler()

    @property
    def sync_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        return self.get_sync_pool()
