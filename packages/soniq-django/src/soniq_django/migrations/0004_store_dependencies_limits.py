"""Brings Soniq's own schema up to its latest step on ``manage.py migrate`` (job
dependencies, fleet-wide limits, cancel requests and watched jobs; PostgreSQL migration 6 / SQLite
schema version 6).

``create_schema`` runs the backend's idempotent ``setup()``; the unmanaged models are unchanged.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import migrations

from soniq_django.schema import create_schema


class Migration(migrations.Migration):
    atomic = False

    dependencies: ClassVar[list[tuple[str, str]]] = [("soniq_django", "0003_store_dedup_keys")]

    operations: ClassVar[list[migrations.operations.base.Operation]] = [
        migrations.RunPython(create_schema, migrations.RunPython.noop, elidable=False),
    ]
