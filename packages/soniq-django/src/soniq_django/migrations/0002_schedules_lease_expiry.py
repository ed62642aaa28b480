"""Bring Soniq's store to its schedules, leader lease and `expires_at` step (store migration 4).

`create_schema` runs the backend's idempotent setup again, which applies every
store migration the database does not have yet; on a fresh database 0001
already did, and this finds the schema current.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import migrations

from soniq_django.schema import create_schema


class Migration(migrations.Migration):
    # As in 0001: the backend writes on its own connection, outside a migration transaction.
    atomic = False

    dependencies: ClassVar[list[tuple[str, str]]] = [("soniq_django", "0001_initial")]

    operations: ClassVar[list[migrations.operations.base.Operation]] = [
        migrations.RunPython(create_schema, migrations.RunPython.noop, elidable=False),
    ]
