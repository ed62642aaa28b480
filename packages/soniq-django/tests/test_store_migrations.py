"""`manage.py migrate` brings Soniq's store to its latest step, including schedules and the leader lease,
and unique windows with debounced jobs."""

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


@pytest.mark.django_db
def test_the_unique_windows_step_follows_progress_and_logs_and_is_applied() -> None:
    loader = MigrationLoader(connection, ignore_no_migrations=True)
    migration = loader.get_migration("soniq_django", "0008_store_unique_windows_and_debounce")
    assert ("soniq_django", "0007_store_job_progress_and_logs") in migration.dependencies
    assert ("soniq_django", "0008_store_unique_windows_and_debounce") in loader.applied_migrations


@pytest.mark.usefixtures("soniq_db")
def test_migrate_added_the_unique_windows_table_and_the_debounce_deadline() -> None:
    with connection.cursor() as cursor:
        tables = set(connection.introspection.table_names(cursor))
        columns = {column.name for column in connection.introspection.get_table_description(cursor, "soniq_jobs")}
        # Read, not introspected: Django's SQLite introspection cannot parse a WITHOUT ROWID table.
        cursor.execute("SELECT * FROM soniq_unique_windows WHERE 1 = 0")
        windows = {column[0] for column in cursor.description}
    assert "soniq_unique_windows" in tables
    assert "debounce_deadline" in columns
    assert {"key", "job_id", "expires_at"} <= windows
