"""Settings of the test project: SQLite by default, PostgreSQL with SONIQ_DJANGO_TEST_DB=postgres.

A worker subprocess gets SONIQ_DJANGO_DB_NAME, the name of the test database
pytest-django created, so it opens the same database the test writes to.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SECRET_KEY = "soniq-django-tests"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["testserver"]
ROOT_URLCONF = "djproject.urls"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "soniq_django",
    "djproject.testapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

KIND = os.environ.get("SONIQ_DJANGO_TEST_DB", "sqlite")
NAME_OVERRIDE = os.environ.get("SONIQ_DJANGO_DB_NAME")
DATABASE: dict[str, Any]
if KIND == "postgres":
    url = urlsplit(os.environ.get("SONIQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"))
    DATABASE = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": NAME_OVERRIDE or "soniq_django",
        "USER": url.username or "postgres",
        "PASSWORD": url.password or "",
        "HOST": url.hostname or "127.0.0.1",
        "PORT": str(url.port or 5432),
    }
elif KIND == "sqlite":
    base = Path(tempfile.gettempdir()) / f"soniq-django-{os.getpid()}"
    DATABASE = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": NAME_OVERRIDE or f"{base}.sqlite3",
        # A file, not pytest-django's in-memory default: the worker is another process.
        "TEST": {"NAME": f"{base}-test.sqlite3"},
    }
else:
    raise RuntimeError(f"SONIQ_DJANGO_TEST_DB must be sqlite or postgres, not {KIND!r}")
DATABASES = {"default": DATABASE}

TASKS = {
    "default": {
        "BACKEND": "soniq_django.SoniqBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"TASK_MODULES": ["djproject.testapp.more_tasks"]},
    },
    # Django's reference backend: test_like_immediate runs the same tasks on it and compares the results.
    "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend", "QUEUES": ["default", "emails"]},
}
