"""`manage.py migrate` brings Soniq's store to its latest step, including schedules and the leader lease."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader


@pytest.mark.django_db
def test_the_store_migration_step_is_in_the_graph_after_the_initial_one() -> None:
    loader = MigrationLoader(connection, ignore_no_migrations=True)
    migration = loader.get_migration("soniq_django", "0002_schedules_lease_expiry")
    assert ("soniq_django", "0001_initial") in migration.dependencies
    assert ("soniq_django", "0002_schedules_lease_expiry") in loader.applied_migrations


@pytest.mark.usefixtures("soniq_db")
def test_migrate_created_the_schedule_and_lease_tables_and_the_expiry_column() -> None:
    with connection.cursor() as cursor:
        tables = set(connection.introspection.table_names(cursor))
        columns = {column.name for column in connection.introspection.get_table_description(cursor, "soniq_jobs")}
    assert {"soniq_schedules", "soniq_leader"} <= tables
    assert "expires_at" in columns


@pytest.mark.usefixtures("soniq_db")
def test_migrate_added_queue_pauses_job_steps_versions_progress_and_logs() -> None:
    with connection.cursor() as cursor:
        tables = set(connection.introspection.table_names(cursor))
        columns = {column.name for column in connection.introspection.get_table_description(cursor, "soniq_jobs")}
        dead_letter = {
            column.name for column in connection.introspection.get_table_description(cursor, "soniq_dead_letter_jobs")
        }
    assert "soniq_paused_queues" in tables
    assert {"version", "steps", "checkpoint", "shutdown_nacks", "progress", "logs"} <= columns
    assert {"version", "logs"} <= dead_letter
