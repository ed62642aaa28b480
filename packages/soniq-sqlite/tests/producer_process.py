"""A producer OS process for the unique-window and debounce races (run as a script, not collected).

Usage: python producer_process.py window URL PRODUCER KEYS   -> one window job per key, key-0 .. key-(KEYS-1)
       python producer_process.py debounce URL PRODUCER KEYS -> one debounced job per key, args naming PRODUCER
It connects, prints "ready", waits for a line on stdin, enqueues, then prints one JSON line:
{"ids": {key: stored id}, "sent": {key: the id it sent}}.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from datetime import UTC, datetime, timedelta

from soniq.params import EnqueueJobsParams
from soniq.records import NewJob, UniqueWindow
from soniq_sqlite import SQLiteBackend


def _job(kind: str, key: str, producer: str) -> NewJob:
    now = datetime.now(UTC)
    common: dict[str, object] = {
        "id": str(uuid.uuid4()),
        "job_name": "tests.race",
        "args": {"producer": producer, "key": key},
        "queue": "default",
        "priority": 100,
        "max_attempts": 3,
    }
    if kind == "window":
        window = UniqueWindow(key=key, starts_at=now, expires_at=now + timedelta(hours=1))
        return NewJob(scheduled_at=now, unique_window=window, **common)  # type: ignore[arg-type]
    return NewJob(  # type: ignore[arg-type]
        scheduled_at=now + timedelta(minutes=1),
        dedup_key=key,
        debounce_deadline=now + timedelta(minutes=10),
        **common,
    )


async def produce(kind: str, url: str, producer: str, keys: int) -> dict[str, object]:
    backend = SQLiteBackend.from_url(url)
    await backend.connect()
    print("ready", flush=True)
    sys.stdin.readline()
    ids: dict[str, str] = {}
    sent: dict[str, str] = {}
    try:
        for n in range(keys):
            key = f"key-{n}"
            job = _job(kind, key, producer)
            stored = await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
            assert stored is not None
            ids[key] = stored[0]
            sent[key] = job.id
    finally:
        await backend.close()
    return {"ids": ids, "sent": sent}


def main() -> None:
    kind, url, producer, keys = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    outcome = asyncio.run(produce(kind, url, producer, keys))
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
