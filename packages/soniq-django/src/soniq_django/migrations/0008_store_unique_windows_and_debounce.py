"""Brings Soniq's own schema up to its latest step on ``manage.py migrate``: unique windows and
debounced jobs (PostgreSQL migration 10, SQLite version 9: ``soniq_jobs.debounce_deadline`` and the
table ``soniq_unique_windows``).

``create_schema`` runs the backend's idempotent ``setup()``; the unmanaged models are unchanged.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import migrations

from soniq_django.schema import create_schema


class Migration(migrations.Migration):
    atomic = False

    dependencies: ClassVar[list[tuple[str, str]]] = [("soniq_django", "0007_store_job_progress_and_logs")]

    operations: ClassVar[list[migrations.operations.base.Operation]] = [
        migrations.RunPython(create_schema, migrations.RunPython.noop, elidable=False),
    ]
