"""`setup_schema`: the family found, what setup runs, dry runs that change nothing."""

from __future__ import annotations

import asyncio

from soniq.backend import SchemaFamily, SchemaReport, SetupSchemaParams
from soniq_contract_tests.harness import ContractHarness, fresh_namespace

FAMILIES = {family.value for family in SchemaFamily}


class SchemaSetupContract:
    async def test_setup_schema_on_a_set_up_store_reports_it_current(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            report = await backend.setup_schema(SetupSchemaParams())
            assert isinstance(report, SchemaReport)
            assert report.family == SchemaFamily.CURRENT.value
            assert report.pending == ()
            assert report.upgraded_from is None
            status = await backend.schema_status()
            assert status.up_to_date

    async def test_dry_run_on_a_fresh_namespace_changes_nothing(self, contract: ContractHarness) -> None:
        backend = contract.factory(fresh_namespace())
        try:
            before = await backend.schema_status()
            report = await backend.setup_schema(SetupSchemaParams(dry_run=True))
            assert report.dry_run
            assert report.family in FAMILIES
            assert report.family in (SchemaFamily.EMPTY.value, SchemaFamily.CURRENT.value)
            after = await backend.schema_status()
            assert after.to_dict() == before.to_dict(), "a dry run changed the schema"
            if report.family == SchemaFamily.EMPTY.value:
                assert {step.version for step in before.pending} == set(report.pending)
            real = await backend.setup_schema(SetupSchemaParams())
            assert real.pending == report.pending, "the real run applied other steps than the dry run listed"
            assert (await backend.schema_status()).up_to_date
        finally:
            try:
                await backend.drop_schema()
            finally:
                await backend.close()

    async def test_concurrent_setup_schema_calls_apply_each_step_once(self, contract: ContractHarness) -> None:
        namespace = fresh_namespace()
        backends = [contract.factory(namespace) for _ in range(3)]
        try:
            reports = await asyncio.gather(*(b.setup_schema(SetupSchemaParams()) for b in backends))
            applied = [version for report in reports for version in report.pending]
            assert len(applied) == len(set(applied)), f"a step was applied twice: {applied}"
            assert (await backends[0].schema_status()).up_to_date
        finally:
            try:
                await backends[0].drop_schema()
            finally:
                for backend in backends:
                    await backend.close()
