"""Brings Soniq's own schema up to its latest step on ``manage.py migrate``: paused queues, job
steps and checkpoints, job versions and shutdown nacks (PostgreSQL migration 8, SQLite version 7).

``create_schema`` runs the backend's idempotent ``setup()``; the unmanaged models are unchanged.
Rows inserted by this package leave ``version`` to its column default, 1: a Django task has one
version.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import migrations

from soniq_django.schema import create_schema


class Migration(migrations.Migration):
    atomic = False

    dependencies: ClassVar[list[tuple[str, str]]] = [("soniq_django", "0005_store_claim_only_queued_index")]

    operations: ClassVar[list[migrations.operations.base.Operation]] = [
        migrations.RunPython(create_schema, migrations.RunPython.noop, elidable=False),
    ]
