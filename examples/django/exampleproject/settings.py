"""The sample project: SQLite in ./example.sqlite3 by default, PostgreSQL when EXAMPLE_POSTGRES_NAME is set."""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = True
USE_TZ = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
ROOT_URLCONF = "exampleproject.urls"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "soniq_django",
    "orders",
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
STATIC_URL = "static/"

if os.environ.get("EXAMPLE_POSTGRES_NAME"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ["EXAMPLE_POSTGRES_NAME"],
            "USER": os.environ.get("EXAMPLE_POSTGRES_USER", "postgres"),
            "PASSWORD": os.environ.get("EXAMPLE_POSTGRES_PASSWORD", ""),
            "HOST": os.environ.get("EXAMPLE_POSTGRES_HOST", "127.0.0.1"),
            "PORT": os.environ.get("EXAMPLE_POSTGRES_PORT", "5432"),
        }
    }
else:
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "example.sqlite3"}}

TASKS = {
    "default": {
        "BACKEND": "soniq_django.SoniqBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            "MAX_RETRIES": 2,
            "SETTINGS": {"concurrency": 4, "shutdown_timeout": 10},
        },
    }
}

LOGGING = {
    "version": 1,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"soniq": {"handlers": ["console"], "level": "INFO"}},
}
