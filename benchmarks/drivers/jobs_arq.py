"""The bench job for arq, and the settings its CLI loads: `arq jobs_arq.WorkerSettings`.

Everything but the Redis address is arq's default (max_jobs 10, poll_delay
0.5 s, queue_read_limit 100, keep_result 3600 s).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from arq.connections import RedisSettings

from _latency import record_pickup

REDIS_SETTINGS = RedisSettings(host="127.0.0.1", port=6379, database=int(os.environ.get("BENCH_REDIS_DB", "12")))


async def noop(ctx: dict[str, Any], n: int = 0, t: float | None = None) -> None:
    record_pickup(t)


class WorkerSettings:
    functions: ClassVar[list[Any]] = [noop]
    redis_settings = REDIS_SETTINGS
