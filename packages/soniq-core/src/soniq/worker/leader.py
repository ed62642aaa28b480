"""The leader lease and the once-per-fleet maintenance that runs under it.

One lease (``leader``) lives in the store. Every worker and ``soniq
scheduler`` tries to take it every `leader_lease_ttl / 3` seconds; the holder
renews it on the same beat. A renewal that fails (the store unreachable, or
another holder took over after our lease lapsed) ends this process's
leadership at once, so it never prunes on a lease it may no longer hold. The
lease is released on a clean shutdown, so a successor does not wait out the
ttl.

Maintenance (only while leading): `prune_jobs` deletes finished rows past
their `expires_at` in batches of `prune_batch_size`, pausing between batches
(four times as long as the batch took, at least `prune_pause`) so pruning
takes at most a fifth of the store's time and claims never queue behind a
long delete; with
`dead_letter_retention_days` set, `prune_dead_letters` does the same for
dead-letter rows older than that.

Roles: the lease is the backend's `ScheduleStore` role, so a backend without it has no leader
(`LeaderDuties` refuses it; `soniq.scheduling.duties.FleetDuties` then starts none). Pruning is
the `RetentionStore` role: a leader on a backend without it holds the lease and prunes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from soniq import features
from soniq.backend import QueueStore, RetentionStore, has_role
from soniq.params import AcquireLeaseParams, PruneDeadLettersParams, PruneJobsParams, ReleaseLeaseParams
from soniq.settings import Settings

__all__ = ["LEADER_LEASE", "LeaderDuties"]

logger = logging.getLogger("soniq.leader")

LEADER_LEASE = "leader"
RELEASE_TIMEOUT = 2.0
PRUNE_DUTY_CYCLE = 0.2
"""At most this share of wall time is spent inside prune statements: after a batch that took t
seconds the leader waits at least t * (1 - d) / d (4t), and never less than `prune_pause`."""


class LeaderDuties:
    """Hold the lease when free and run maintenance under it, until `stopping` is set.

    `backend` must fill `ScheduleStore` (else `MissingBackendRoleError`); without `RetentionStore`
    there is no maintenance (`prunes` is False)."""

    def __init__(self, backend: QueueStore, settings: Settings, *, holder: str) -> None:
        self.backend = features.schedule_store(backend, "the leader lease")
        self.retention: RetentionStore | None = (
            features.retention_store(backend) if has_role(backend, RetentionStore) else None
        )
        self.holder = holder
        self.ttl = settings.leader_lease_ttl
        self.batch = settings.prune_batch_size
        self.pause = settings.prune_pause
        self.interval = settings.prune_interval
        retention = settings.dead_letter_retention_days
        self.dead_letter_retention = timedelta(days=retention) if retention is not None else None
        self.leading = asyncio.Event()
        self.pruned_jobs = 0
        self.pruned_dead_letters = 0

    @property
    def prunes(self) -> bool:
        """Whether this leader prunes (the backend fills `RetentionStore`)."""
        return self.retention is not None

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    async def run(self, stopping: asyncio.Event) -> None:
        maintenance = asyncio.create_task(self._maintain(stopping), name="soniq-maintenance") if self.prunes else None
        try:
            await self._hold(stopping)
        finally:
            if maintenance is not None:
                maintenance.cancel()
                await asyncio.gather(maintenance, return_exceptions=True)
            await self._release()

    async def _hold(self, stopping: asyncio.Event) -> None:
        beat = self.ttl / 3
        while not stopping.is_set():
            try:
                lease = await asyncio.wait_for(
                    self.backend.acquire_lease(AcquireLeaseParams(holder=self.holder, ttl=self.ttl, name=LEADER_LEASE)),
                    timeout=beat,
                )
            except Exception as exc:
                lease = None
                if self.is_leader:
                    logger.warning("%s: could not renew the leader lease (%s); no longer leader", self.holder, exc)
            if lease is not None and not self.is_leader:
                logger.info("%s is now the leader (lease ttl %gs)", self.holder, self.ttl)
                self.leading.set()
            elif lease is None and self.is_leader:
                logger.warning("%s lost the leader lease", self.holder)
                self.leading.clear()
            await _sleep_unless(stopping, beat)

    async def _release(self) -> None:
        if not self.is_leader:
            return
        self.leading.clear()
        try:
            await asyncio.wait_for(
                self.backend.release_lease(ReleaseLeaseParams(holder=self.holder, name=LEADER_LEASE)),
                timeout=RELEASE_TIMEOUT,
            )
            logger.info("%s released the leader lease", self.holder)
        except Exception as exc:
            logger.warning(
                "%s: releasing the leader lease failed (%s); it lapses after %gs", self.holder, exc, self.ttl
            )

    async def _maintain(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            await self.leading.wait()
            try:
                await self.prune_once(stopping)
            except Exception as exc:
                logger.warning("%s: pruning failed: %s", self.holder, exc)
            await _sleep_unless(stopping, self.interval)

    async def prune_once(self, stopping: asyncio.Event | None = None) -> tuple[int, int]:
        """One maintenance pass; returns the job and dead-letter rows it deleted ((0, 0) without
        `RetentionStore`)."""
        store = self.retention
        if store is None:
            return 0, 0
        jobs = await self._in_batches(lambda: store.prune_jobs(PruneJobsParams(limit=self.batch)), stopping)
        dead = 0
        if self.dead_letter_retention is not None:
            before = datetime.now(UTC) - self.dead_letter_retention
            dead = await self._in_batches(
                lambda: store.prune_dead_letters(PruneDeadLettersParams(before=before, limit=self.batch)),
                stopping,
            )
        self.pruned_jobs += jobs
        self.pruned_dead_letters += dead
        if jobs or dead:
            logger.info("%s pruned %d finished job rows and %d dead-letter rows", self.holder, jobs, dead)
        return jobs, dead

    async def _in_batches(self, batch: Callable[[], Awaitable[int]], stopping: asyncio.Event | None) -> int:
        total = 0
        loop = asyncio.get_running_loop()
        while self.is_leader and not (stopping is not None and stopping.is_set()):
            started = loop.time()
            deleted = await batch()
            took = loop.time() - started
            total += deleted
            if deleted < self.batch:
                break
            # A slow delete means a busy store: back off in proportion, so claims keep their share.
            await asyncio.sleep(max(self.pause, took * (1 - PRUNE_DUTY_CYCLE) / PRUNE_DUTY_CYCLE))
        return total


async def _sleep_unless(stopping: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stopping.wait(), timeout=seconds)
    except TimeoutError:
        pass
