"""The `DebouncedJobs` role: a repeat enqueue moves the queued job instead of adding one.

The role adds no method. A debounced job arrives with a `dedup_key` and a `debounce_deadline`
(the producer's first-enqueue time plus `debounce_max_wait`); its `scheduled_at` is the
producer's now plus `debounce`, never after the deadline. A backend that declares the role
promises that `QueueStore.enqueue_jobs`, for such a job:

- inserts it as any keyed job when no `queued` row holds the key, storing `debounce_deadline`
  with the row;
- when a `queued` row holds the key and that row was stored with a `debounce_deadline`,
  inserts nothing and, in the same atomic step that finds the holder, replaces the holder's
  `args` with the new job's and sets its ``scheduled_at = min(new job's scheduled_at, holder's
  debounce_deadline)`` and its ``updated_at`` to now; the holder keeps its id, its deadline,
  its `created_at` and everything else. Its place in the returned list is the holder's id;
- when the holder was not stored debounced (a plain `dedup_key` or `unique=True` job with the
  same key), leaves the holder as it is and returns its id, as for any keyed job.

Racing producers in any number of processes leave exactly one queued row per key, whose
arguments are those of one of the enqueues and whose `scheduled_at` never passes its deadline.
A claim releases the key as for every keyed job, so an enqueue while the job runs starts a new
queued row. Core never sends two debounced jobs with the same key in one call, never sends
`debounce_deadline` with `depends_on` or a `unique_window`, and never sends it to a backend
without the role (`debounce=` raises `MissingBackendRoleError` there).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

VERSION = 1
"""The version of `DebouncedJobs` this soniq-core speaks."""


@runtime_checkable
class DebouncedJobs(Protocol):
    """A marker: enqueue honours `NewJob.debounce_deadline` (see the module's text)."""


__all__ = ["VERSION", "DebouncedJobs"]
