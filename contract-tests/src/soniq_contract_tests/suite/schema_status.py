"""`schema_status`: the applied and pending schema steps, read without changing anything."""

from __future__ import annotations

import json

from soniq.backend import SchemaStatus
from soniq_contract_tests.harness import ContractHarness, fresh_namespace


def _check_shape(status: SchemaStatus) -> None:
    assert isinstance(status, SchemaStatus), f"schema_status returned {type(status).__name__}, not SchemaStatus"
    versions = [step.version for step in status.applied] + [step.version for step in status.pending]
    assert versions == sorted(versions), f"steps are not in version order: {versions}"
    assert len(set(versions)) == len(versions), f"a step is both applied and pending: {versions}"
    assert all(step.name for step in (*status.applied, *status.pending)), "every step needs a name"
    assert status.backend
    assert status.location
    json.dumps(status.to_dict())  # what `soniq migrate-status --json` prints


class SchemaStatusContract:
    async def test_schema_status_after_setup_is_up_to_date(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            status = await backend.schema_status()
            _check_shape(status)
            assert status.applied, "a set-up store has at least one applied step"
            assert status.pending == ()
            assert status.up_to_date
            assert not status.newer_than_known
            assert status.current_version == status.applied[-1].version

    async def test_schema_status_before_setup_reports_pending_steps_and_applies_none(
        self, contract: ContractHarness
    ) -> None:
        backend = contract.factory(fresh_namespace())
        try:
            before = await backend.schema_status()
            _check_shape(before)
            again = await backend.schema_status()
            assert again.to_dict() == before.to_dict(), "reading the status changed it"
            await backend.setup()
            after = await backend.schema_status()
            assert after.up_to_date
            # Whatever was pending before setup is what setup applied.
            assert {s.version for s in before.pending} <= {s.version for s in after.applied}
            assert {s.version for s in after.applied} == {s.version for s in before.applied} | {
                s.version for s in before.pending
            }
        finally:
            try:
                await backend.drop_schema()
            finally:
                await backend.close()
