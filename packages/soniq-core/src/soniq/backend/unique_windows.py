"""The `UniqueWindows` role: at most one job per key per window, whatever the job's state.

The role adds no method. A backend that declares it promises that `QueueStore.enqueue_jobs`
honours `NewJob.unique_window` (`soniq.records.UniqueWindow`: `key`, `starts_at`,
`expires_at`, all from the producer's clock):

- The store keeps, per key, the id of the job that holds it and the `expires_at` of its window.
- A job whose key is held by a window with ``expires_at > job.unique_window.starts_at`` is not
  inserted; its place in the returned list is the holder's id, even when the holder's row has
  since finished, been dead-lettered or pruned.
- Otherwise (no window, or one that has expired) the job is inserted and the key is set to
  ``(job.id, expires_at)`` in the same transaction or script, replacing an expired window.
- The check and the set are one atomic step (a primary key with an upsert, a script): producers
  racing on one key, in any number of processes, store exactly one row per window and all get
  its id.
- A window is not released by a claim, a cancel, a dead letter, a retry or a delete; it ends
  only when it expires. A backend may delete expired windows at any time (a prune, a TTL).

A job with a window carries no `dedup_key`: the window is its only deduplication. Core never
sends two jobs with the same window key in one call, never sends a window together with
`depends_on` or `debounce_deadline`, and never sends `unique_window` to a backend without the
role (`unique_for=` raises `MissingBackendRoleError` there).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.records import UniqueWindow

VERSION = 1
"""The version of `UniqueWindows` this soniq-core speaks."""


@runtime_checkable
class UniqueWindows(Protocol):
    """A marker: enqueue honours `NewJob.unique_window` (see the module's text)."""


__all__ = ["VERSION", "UniqueWindow", "UniqueWindows"]
