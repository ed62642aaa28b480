"""What soniq-minimal lends the contract suite (entry-point group ``soniq_contract_tests.fixtures``).

The suite reads `backend_class` and `corrupt_row` here; nothing from the suite is imported. There
is no ``transaction``: this store cannot join a caller's transaction.
"""

from __future__ import annotations

from soniq_minimal.backend import MinimalBackend

backend_class = MinimalBackend


async def corrupt_row(backend: MinimalBackend, job_id: str, raw_args: str) -> None:
    """Overwrite the stored args text of an existing row with `raw_args`, verbatim."""
    backend.put_args_text(job_id, raw_args)
