"""What a store's schema turned out to be, and the errors for schemas `setup` must not touch.

Backends detect the family before every migration (``soniq setup`` and the first use
by a worker or producer), so a schema that is not this release's is never read as
current. Only an explicit ``soniq setup`` upgrades a soniq 0.1.0 schema.
"""

from __future__ import annotations

from enum import StrEnum

from soniq.errors import SoniqError


class SchemaFamily(StrEnum):
    EMPTY = "empty"
    """No Soniq table yet: `setup` creates the schema."""
    CURRENT = "soniq"
    """This release's schema (possibly with migrations pending)."""
    LEGACY_010 = "soniq-0.1.0"
    """The schema soniq 0.1.0 created: `setup` upgrades it in place."""
    NEWER = "newer"
    """Migrations recorded that this release does not know."""
    FOREIGN = "foreign"
    """Soniq's table names with other columns, or only some of our tables."""


class SchemaStateError(SoniqError, RuntimeError):
    """The schema is one `setup` will not migrate (newer, mixed or unknown), or one that
    needs an explicit ``soniq setup`` first (0.1.0). Nothing was changed."""

    def __init__(self, family: SchemaFamily, message: str) -> None:
        self.family = family
        super().__init__(message)


class LegacyWorkersActiveError(SchemaStateError):
    """soniq 0.1.0 workers still heartbeat into the database being upgraded."""

    def __init__(self, count: int, seconds: float) -> None:
        self.count = count
        super().__init__(
            SchemaFamily.LEGACY_010,
            f"{count} soniq 0.1.0 worker(s) heartbeated in the last {seconds:g}s, so the database is "
            "still in use; stop them (and back the database up) before upgrading, or run "
            "`soniq setup --force` to upgrade anyway (their in-flight jobs go to stale recovery)",
        )
