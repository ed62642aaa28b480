"""The `SchemaAdmin` role: reporting, upgrading and dropping the store's schema."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soniq.params import (
    SetupSchemaParams,
)
from soniq.records import (
    SchemaReport,
    SchemaStatus,
)

VERSION = 1
"""The version of `SchemaAdmin` this soniq-core speaks."""


@runtime_checkable
class SchemaAdmin(Protocol):
    """Reporting, upgrading and dropping the store's schema."""

    async def schema_status(self) -> SchemaStatus:
        """The schema steps applied to the store and those `setup()` would still apply.

        Read-only and safe on a store that was never set up: it creates nothing, applies
        nothing (even where `connect()` would upgrade the schema by itself) and needs no
        `connect()` first. Steps a newer release applied set `newer_than_known`."""

    async def setup_schema(self, params: SetupSchemaParams, /) -> SchemaReport:
        """`setup` with a report: detect the schema family (`soniq.schema_state.SchemaFamily`)
        and bring it to this release's schema, all or nothing, serialised across processes
        (several at once apply each step once). A soniq 0.1.0 schema is upgraded in place
        keeping every row, unless 0.1.0 workers still heartbeat into it (then
        `LegacyWorkersActiveError`, unless `force`). A newer, mixed or unknown schema raises
        `SchemaStateError` with nothing changed. With `dry_run` nothing is changed and the
        report lists what would run. Stores without a schema report `"soniq"` and nothing
        pending."""

    async def drop_schema(self) -> None:
        """Delete every table or key this backend created in its namespace.
        For tests and teardown; the backend must be usable again after `setup`."""


__all__ = [
    "VERSION",
    "SchemaAdmin",
    "SchemaReport",
    "SchemaStatus",
    "SetupSchemaParams",
]
