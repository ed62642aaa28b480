"""Brings Soniq's own schema up to its latest step on ``manage.py migrate``: job progress and job
logs (PostgreSQL migration 9, SQLite version 8).

``create_schema`` runs the backend's idempotent ``setup()``; the unmanaged models are unchanged.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import migrations

from soniq_django.schema import create_schema


class Migration(migrations.Migration):
    atomic = False

    dependencies: ClassVar[list[tuple[str, str]]] = [("soniq_django", "0006_store_pauses_steps_versions")]

    operations: ClassVar[list[migrations.operations.base.Operation]] = [
        migrations.RunPython(create_schema, migrations.RunPython.noop, elidable=False),
    ]
