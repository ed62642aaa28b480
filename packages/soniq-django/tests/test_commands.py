"""`soniq_setup`, `soniq_status`, and the URL built from DATABASES."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connections
from djproject.testapp.tasks import add

from soniq_django.backend import soniq_priority
from soniq_django.config import url_for_settings


@pytest.mark.usefixtures("soniq_db")
def test_soniq_setup_is_idempotent_beside_the_migration() -> None:
    out = StringIO()
    call_command("soniq_setup", stdout=out)
    call_command("soniq_setup", stdout=out)
    assert out.getvalue().count("Soniq schema ready") == 2


@pytest.mark.usefixtures("soniq_db")
def test_soniq_status_counts_jobs() -> None:
    add.enqueue(1, 2)
    add.enqueue(3, 4)
    out = StringIO()
    call_command("soniq_status", "--json", stdout=out)
    payload = json.loads(out.getvalue())
    assert payload["stats"]["queued"] == 2
    assert payload["stats"]["total"] == 2
    assert payload["workers"] == []

    text = StringIO()
    call_command("soniq_status", stdout=text)
    assert "queued  2" in text.getvalue()


@pytest.mark.usefixtures("soniq_db")
def test_soniq_status_names_the_database_with_its_password_masked() -> None:
    settings = connections["default"].settings_dict
    if connections["default"].vendor == "postgresql":
        # The test server trusts local connections, so a password in the settings is sent and ignored.
        password = settings["PASSWORD"]
        settings["PASSWORD"] = "s3cret-pw"
        try:
            text, payload = _status()
        finally:
            settings["PASSWORD"] = password
        assert "s3cret-pw" not in text + json.dumps(payload)
        host = f"{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"
        expected = f"postgresql://{settings['USER']}:***@{host}"
        assert payload["database_url"] == expected
    else:
        expected = f"sqlite:///{settings['NAME']}"
        text, payload = _status()
        assert payload["database_url"] == expected
    assert text.splitlines()[0] == f"    database  {expected}"


def _status() -> tuple[str, dict[str, object]]:
    text, raw = StringIO(), StringIO()
    call_command("soniq_status", stdout=text)
    call_command("soniq_status", "--json", stdout=raw)
    payload: dict[str, object] = json.loads(raw.getvalue())
    return text.getvalue(), payload


def test_postgres_url_from_settings() -> None:
    settings = {"NAME": "app", "USER": "me", "PASSWORD": "p@ss", "HOST": "db", "PORT": "6432"}
    assert url_for_settings(settings, vendor="postgresql") == "postgresql://me:p%40ss@db:6432/app"
    socket = {"NAME": "app", "USER": "me", "HOST": "/var/run/postgresql"}
    assert url_for_settings(socket, vendor="postgresql") == "postgresql://me@/app?host=%2Fvar%2Frun%2Fpostgresql"


def test_sqlite_url_is_absolute_and_memory_is_refused() -> None:
    assert url_for_settings({"NAME": "/srv/app/db.sqlite3"}, vendor="sqlite") == "sqlite:////srv/app/db.sqlite3"
    with pytest.raises(ImproperlyConfigured, match="file the worker process can open"):
        url_for_settings({"NAME": ":memory:"}, vendor="sqlite")


def test_other_databases_get_a_clear_error() -> None:
    with pytest.raises(ImproperlyConfigured, match="supports PostgreSQL and SQLite"):
        url_for_settings({"ENGINE": "django.db.backends.mysql", "NAME": "app"}, vendor="mysql")


def test_priority_mapping() -> None:
    assert [soniq_priority(p) for p in (100, 0, -100)] == [0, 100, 200]
