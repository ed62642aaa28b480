"""What soniq-memory lends the contract suite (entry-point group ``soniq_contract_tests.fixtures``).

The suite reads `backend_class` and `corrupt_row` from this module; it imports nothing from the
suite. The memory store has no transactions, so there is no ``transaction``.
"""

from __future__ import annotations

from soniq_memory.backend import MemoryBackend

backend_class = MemoryBackend


async def corrupt_row(backend: MemoryBackend, job_id: str, raw_args: str) -> None:
    """Store `raw_args` as the row's args, verbatim, through the store's public test API."""
    backend.put_raw_args(job_id, raw_args)
