"""Creating Soniq's schema from ``manage.py migrate``.

The ``0001`` migration calls ``app.setup()``, the same idempotent call as
``soniq setup`` and ``manage.py soniq_setup``, so the three coexist: whichever
runs first creates the tables, the others find them current. It runs only
for the databases a Soniq ``TASKS`` backend writes to.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from soniq import Soniq
from soniq_django.config import BACKEND_PATH, url_for_settings
from soniq_django.runtime import run_sync


def soniq_databases() -> set[str]:
    databases = {
        params.get("OPTIONS", {}).get("DATABASE", "default")
        for params in getattr(settings, "TASKS", {}).values()
        if params.get("BACKEND") == BACKEND_PATH
    }
    return databases or {"default"}


def create_schema(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.alias not in soniq_databases():
        return
    url = url_for_settings(connection.settings_dict, vendor=connection.vendor)

    async def setup() -> None:
        async with Soniq(url) as app:
            await app.setup()

    run_sync(setup)
