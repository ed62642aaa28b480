"""What a store's schema turned out to be (the errors for schemas `setup` must not touch are in
`soniq.errors`).

Backends detect the family before every migration (``soniq setup`` and the first use
by a worker or producer), so a schema that is not this release's is never read as
current. Only an explicit ``soniq setup`` upgrades a soniq 0.1.0 schema.
"""

from __future__ import annotations

from enum import StrEnum

from soniq.errors import LegacyWorkersActiveError as LegacyWorkersActiveError
from soniq.errors import SchemaStateError as SchemaStateError


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
