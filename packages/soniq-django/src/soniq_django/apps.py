from __future__ import annotations

from django.apps import AppConfig


class SoniqDjangoConfig(AppConfig):
    name = "soniq_django"
    label = "soniq_django"
    verbose_name = "Soniq"
    default_auto_field = "django.db.models.AutoField"
