from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from soniq import Soniq
from soniq_django.config import backend_config, database_url, default_alias
from soniq_django.runtime import with_app


class Command(BaseCommand):
    help = "Create or upgrade Soniq's tables (what `migrate` does once; safe to re-run after upgrading Soniq)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--backend", help="the TASKS alias (default: the Soniq one)")

    def handle(self, *args: Any, **options: Any) -> None:
        alias = options["backend"] or default_alias()

        async def setup(app: Soniq) -> None:
            await app.setup()

        with_app(alias, setup)
        config = backend_config(alias)
        self.stdout.write(
            f"Soniq schema ready in database {config.database!r} ({_redacted(database_url(config.database))})"
        )


def _redacted(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    credentials, at, location = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{sep}{credentials.split(':', 1)[0]}:***@{location}"
