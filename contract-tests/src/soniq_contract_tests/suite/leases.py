"""The leader lease: one holder at a time on the store's clock, renewed by its holder, taken over only after expiry."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from soniq.backend import AcquireLeaseParams, GetLeaseParams, LeaseRecord, ReleaseLeaseParams
from soniq_contract_tests.harness import ContractHarness, assert_between, utc_now, wait_until
from soniq_contract_tests.suite.schedules import FIRERS, firers

SHORT_TTL = 0.5
"""Seconds: long enough that no test's next statement outlives it by accident, short to wait out."""


def holder(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:6]}"


def lease_name() -> str:
    return f"lease-{uuid.uuid4().hex[:8]}"


class LeaseContract:
    async def test_a_free_lease_is_acquired_for_ttl_seconds(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            before = utc_now()
            lease = await backend.acquire_lease(AcquireLeaseParams(holder="node-a", ttl=30))
            after = utc_now()
            assert lease is not None
            assert (lease.name, lease.holder) == ("leader", "node-a")
            slack = contract.slack(backend)
            assert_between(lease.acquired_at, before, after, slack, "acquired_at")
            assert lease.renewed_at == lease.acquired_at
            assert abs(lease.expires_at - lease.acquired_at - timedelta(seconds=30)) <= slack
            assert await backend.get_lease(GetLeaseParams()) == lease

    async def test_another_holder_cannot_take_an_unexpired_lease(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            held = await backend.acquire_lease(AcquireLeaseParams(holder="node-a", ttl=30))
            assert held is not None
            assert await backend.acquire_lease(AcquireLeaseParams(holder="node-b", ttl=30)) is None
            assert await backend.get_lease(GetLeaseParams()) == held
            # Leases are independent by name.
            other = await backend.acquire_lease(AcquireLeaseParams(holder="node-b", ttl=30, name=lease_name()))
            assert other is not None
            assert other.holder == "node-b"

    async def test_the_holder_renews_and_keeps_its_acquisition_time(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            first = await backend.acquire_lease(AcquireLeaseParams(holder="node-a", ttl=5))
            assert first is not None

            async def renewed_later() -> bool:
                lease = await backend.acquire_lease(AcquireLeaseParams(holder="node-a", ttl=60))
                assert lease is not None, "the holder's renewal was refused"
                return lease.renewed_at > first.renewed_at

            await wait_until(renewed_later, deadline=10, message="a renewal never moved renewed_at forward")
            renewed = await backend.get_lease(GetLeaseParams())
            assert renewed is not None
            assert (renewed.holder, renewed.acquired_at) == ("node-a", first.acquired_at)
            assert renewed.expires_at > first.expires_at
            assert abs(renewed.expires_at - renewed.renewed_at - timedelta(seconds=60)) <= contract.slack(backend)

    async def test_exactly_one_of_many_concurrent_acquirers_wins(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend, firers(contract, backend, FIRERS) as fleet:
            for round_ in range(3):
                name = lease_name()
                holders = [holder(f"node{index}") for index in range(len(fleet))]
                outcomes = await asyncio.gather(
                    *(
                        peer.acquire_lease(AcquireLeaseParams(holder=who, ttl=30, name=name))
                        for peer, who in zip(fleet, holders, strict=True)
                    )
                )
                winners = [lease for lease in outcomes if lease is not None]
                assert len(winners) == 1, f"round {round_}: {len(winners)} acquirers got the lease"
                current = await backend.get_lease(GetLeaseParams(name=name))
                assert current is not None
                assert current.holder == winners[0].holder

    async def test_takeover_happens_only_after_expiry(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            first = await backend.acquire_lease(AcquireLeaseParams(holder="node-a", ttl=SHORT_TTL))
            assert first is not None
            taken: list[LeaseRecord] = []

            async def took_over() -> bool:
                lease = await backend.acquire_lease(AcquireLeaseParams(holder="node-b", ttl=30))
                if lease is not None:
                    taken.append(lease)
                return bool(taken)

            await wait_until(took_over, deadline=10, interval=0.02, message="an expired lease was never taken over")
            assert taken[0].holder == "node-b"
            # Both timestamps are the store's: the new holder got it no earlier than the old one lapsed.
            assert taken[0].acquired_at >= first.expires_at
            assert taken[0].acquired_at > first.acquired_at
            # The old holder, now expired and replaced, can neither renew nor release it.
            assert await backend.acquire_lease(AcquireLeaseParams(holder="node-a", ttl=30)) is None
            assert not await backend.release_lease(ReleaseLeaseParams(holder="node-a"))

    async def test_an_expired_lease_reads_as_free(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            assert await backend.get_lease(GetLeaseParams()) is None
            assert await backend.acquire_lease(AcquireLeaseParams(holder="node-a", ttl=SHORT_TTL)) is not None

            async def lapsed() -> bool:
                return await backend.get_lease(GetLeaseParams()) is None

            await wait_until(lapsed, deadline=10, interval=0.02, message="an expired lease was still reported held")

    async def test_release_frees_the_lease_only_for_its_holder(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            assert await backend.acquire_lease(AcquireLeaseParams(holder="node-a", ttl=30)) is not None
            assert not await backend.release_lease(ReleaseLeaseParams(holder="node-b"))
            assert await backend.get_lease(GetLeaseParams()) is not None
            assert await backend.release_lease(ReleaseLeaseParams(holder="node-a"))
            assert await backend.get_lease(GetLeaseParams()) is None
            assert not await backend.release_lease(ReleaseLeaseParams(holder="node-a"))
            successor = await backend.acquire_lease(AcquireLeaseParams(holder="node-b", ttl=30))
            assert successor is not None
            assert successor.holder == "node-b"
