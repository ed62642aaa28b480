from __future__ import annotations

from typing import ClassVar

from django.db import migrations, models

import soniq_django.fields
from soniq_django.schema import create_schema


class Migration(migrations.Migration):
    initial = True
    # Soniq's backend creates its tables on its own connection; holding a migration
    # transaction open here would lock a SQLite file against that connection.
    atomic = False

    dependencies: ClassVar[list[tuple[str, str]]] = []

    operations: ClassVar[list[migrations.operations.base.Operation]] = [
        migrations.RunPython(create_schema, migrations.RunPython.noop, elidable=False),
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.TextField(primary_key=True, serialize=False)),
                ("job_name", models.TextField()),
                ("args", soniq_django.fields.SoniqJSONField()),
                ("status", models.TextField()),
                ("attempts", models.IntegerField()),
                ("max_attempts", models.IntegerField()),
                ("queue", models.TextField()),
                ("priority", models.IntegerField()),
                ("scheduled_at", soniq_django.fields.SoniqTimestampField()),
                ("last_error", models.TextField(null=True)),
                ("worker_id", models.TextField(null=True)),
                ("result", soniq_django.fields.SoniqJSONField(null=True)),
                ("started_at", soniq_django.fields.SoniqTimestampField(null=True)),
                ("created_at", soniq_django.fields.SoniqTimestampField()),
                ("updated_at", soniq_django.fields.SoniqTimestampField()),
            ],
            options={
                "verbose_name": "job",
                "db_table": "soniq_jobs",
                "ordering": ("-created_at", "-id"),
                "permissions": (("cancel_job", "Can cancel queued jobs"),),
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="DeadLetterJob",
            fields=[
                ("id", models.TextField(primary_key=True, serialize=False)),
                ("job_name", models.TextField()),
                ("args", soniq_django.fields.SoniqJSONField()),
                ("queue", models.TextField()),
                ("attempts", models.IntegerField()),
                ("last_error", models.TextField(null=True)),
                ("dead_letter_reason", models.TextField()),
                ("moved_to_dead_letter_at", soniq_django.fields.SoniqTimestampField()),
                ("resurrection_count", models.IntegerField()),
                ("last_resurrection_at", soniq_django.fields.SoniqTimestampField(null=True)),
            ],
            options={
                "verbose_name": "dead-letter job",
                "db_table": "soniq_dead_letter_jobs",
                "ordering": ("-moved_to_dead_letter_at", "-id"),
                "permissions": (("replay_deadletterjob", "Can replay dead-letter jobs"),),
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Worker",
            fields=[
                ("id", models.TextField(primary_key=True, serialize=False)),
                ("hostname", models.TextField()),
                ("pid", models.IntegerField()),
                ("queues", soniq_django.fields.SoniqJSONField(null=True)),
                ("concurrency", models.IntegerField()),
                ("status", models.TextField()),
                ("last_heartbeat", soniq_django.fields.SoniqTimestampField()),
                ("started_at", soniq_django.fields.SoniqTimestampField()),
            ],
            options={
                "verbose_name": "worker",
                "db_table": "soniq_workers",
                "ordering": ("-started_at", "-id"),
                "managed": False,
            },
        ),
    ]
