"""The poisoned-job run on Redis: hung, uncancellable, unencodable and corrupt jobs among a normal load."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from soniq_contract_tests.chaos import PoisonConfig, run_poisoned
from soniq_redis import RedisBackend

pytestmark = [pytest.mark.asyncio, pytest.mark.chaos]


async def test_poisoned_jobs_end_in_the_dead_letter_table_and_hold_nothing_else_up(
    redis_url: str, tmp_path: Path
) -> None:
    namespace = f"poison_{uuid.uuid4().hex[:10]}"
    config = PoisonConfig(url=redis_url, namespace=namespace, directory=tmp_path, label="redis")
    try:
        report = await run_poisoned(config)
    finally:
        backend = RedisBackend.from_url(redis_url, namespace=namespace)
        await backend.connect()
        await backend.drop_schema()
        await backend.close()
    print(report.text())
    assert report.violations == []
    assert report.verdict.ends == {"done": config.jobs}
