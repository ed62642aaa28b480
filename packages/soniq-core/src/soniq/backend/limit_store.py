"""The `LimitStore` role: fleet-wide concurrency and rate limits applied inside the claim.

The role adds no method. A backend that declares it promises that `QueueStore.claim_jobs`
honours `ClaimJobsParams.limits` and stores `NewJob.limit_key`, with the guarantees below;
a backend that does not declare it is never sent limits (a worker started with limits on
such a backend stops at start-up with `MissingBackendRoleError`).

With `limits`, a row is claimed only if, for every limit that matches it (see `GroupLimit`
and `soniq.backend.rules.group_of`), claiming it keeps the number of `processing` rows of
its group, counted across the whole store, at most `max_concurrent`, and the number of
claims of its group in the current window of `rate_period` seconds (store clock, windows
aligned to the epoch, see `soniq.backend.rules.window_start`) at most `rate_limit`. The
check and the claim are atomic with respect to every other claim that passes limits, in
any number of processes, so no interleaving ever exceeds a limit. A row held back stays
`queued` and untouched, and the claim goes on past it to the rows behind it (a full group
never blocks other groups). The claim may return fewer than `limit` rows.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.params import GroupLimit

VERSION = 1
"""The version of `LimitStore` this soniq-core speaks."""


@runtime_checkable
class LimitStore(Protocol):
    """A marker: `claim_jobs` enforces `ClaimJobsParams.limits` (see the module's text)."""


__all__ = ["VERSION", "GroupLimit", "LimitStore"]
