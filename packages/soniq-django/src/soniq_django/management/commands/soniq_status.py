from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from soniq import Soniq
from soniq.observers import printable as safe
from soniq.observers import redact_url
from soniq_django.config import backend_config, default_alias
from soniq_django.models import Worker
from soniq_django.runtime import with_app


class Command(BaseCommand):
    help = "Queue counts and workers, as `soniq status` shows them."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--backend", help="the TASKS alias (default: the Soniq one)")
        parser.add_argument("--queue", help="count one queue only")
        parser.add_argument("--json", action="store_true", help="print JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        alias = options["backend"] or default_alias()
        queue = options["queue"]

        async def stats(app: Soniq) -> tuple[str, dict[str, int]]:
            # The URL the app resolved, password masked, as `soniq status` prints it.
            return redact_url(app.settings.resolved_database_url), await app.get_queue_stats(queue=queue)

        database, counts = with_app(alias, stats)
        workers = list(Worker.objects.using(backend_config(alias).database).all())
        if options["json"]:
            payload = {
                "database_url": database,
                "stats": counts,
                "workers": [
                    {
                        "id": w.id,
                        "hostname": w.hostname,
                        "pid": w.pid,
                        "status": w.status,
                        "queues": w.queues,
                        "concurrency": w.concurrency,
                        "last_heartbeat": w.last_heartbeat.isoformat(),
                        "started_at": w.started_at.isoformat(),
                    }
                    for w in workers
                ],
            }
            self.stdout.write(json.dumps(payload, indent=2))
            return
        self.stdout.write(f"{'database':>12}  {safe(database)}")
        for key, value in counts.items():
            self.stdout.write(f"{key:>12}  {value}")
        live = [w for w in workers if w.status != "stopped"]
        self.stdout.write(f"{'workers':>12}  {len(live)} running, {len(workers) - len(live)} stopped")
        for w in live:
            self.stdout.write(f"{'':>12}  {w.id} {w.hostname}:{w.pid} {w.status} since {w.started_at.isoformat()}")
