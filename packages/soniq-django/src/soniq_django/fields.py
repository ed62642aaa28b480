"""Read-only fields for Soniq's tables, whose stored types differ by backend.

soniq-postgres stores ``timestamptz`` and ``json``; soniq-sqlite stores integer
microseconds and JSON text. These fields turn either into Python values and
report an internal type no database backend converts, so Django's own
converters (which would parse SQLite text) stay out of the way.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

from soniq_django.rows import from_microseconds, to_microseconds

if TYPE_CHECKING:
    _TimestampBase = models.Field[datetime, datetime]
    _JSONBase = models.Field[Any, Any]
else:  # django-stubs' generic parameters; Django's own Field takes none at run time
    _TimestampBase = _JSONBase = models.Field


class SoniqTimestampField(_TimestampBase):
    def get_internal_type(self) -> str:
        return "SoniqTimestampField"

    def from_db_value(self, value: Any, expression: Any, connection: BaseDatabaseWrapper) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, int):
            return from_microseconds(value)
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        raise TypeError(f"unexpected stored timestamp {value!r}")

    def get_db_prep_value(self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False) -> Any:
        if isinstance(value, datetime) and connection.vendor == "sqlite":
            return to_microseconds(value)
        return value


class SoniqJSONField(_JSONBase):
    def get_internal_type(self) -> str:
        return "SoniqJSONField"

    def from_db_value(self, value: Any, expression: Any, connection: BaseDatabaseWrapper) -> Any:
        # Django's PostgreSQL drivers decode `json` columns themselves (a JSON string arrives as a str);
        # SQLite hands back the text.
        if connection.vendor == "sqlite" and isinstance(value, str):
            return json.loads(value)
        return value
