from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from workers import WorkerProcess

# The test project (SONIQ_DJANGO_TEST_DB picks its database). Reading one setting loads the module now,
# which is what lets pytest-django's pytest_configure set Django up without --ds.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djproject.settings")
_ = settings.INSTALLED_APPS


def _empty_soniq_tables() -> None:
    with connection.cursor() as cursor:
        for table in (
            "soniq_jobs",
            "soniq_dead_letter_jobs",
            "soniq_workers",
            "soniq_paused_queues",
            "soniq_unique_windows",
        ):
            cursor.execute(f"DELETE FROM {table}")


@pytest.fixture
def soniq_db(transactional_db: None) -> Iterator[None]:
    """A committed-to database (a worker process must see the rows) whose Soniq tables start empty.

    pytest-django flushes only managed tables; Soniq's are unmanaged.
    """
    _empty_soniq_tables()
    yield
    _empty_soniq_tables()


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*args: str, **settings: str) -> WorkerProcess:
        worker = WorkerProcess(tmp_path / f"worker-{len(started)}.log", list(args), settings)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.close()
