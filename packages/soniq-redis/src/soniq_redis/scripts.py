"""The Lua scripts, loaded once per connection pool and run with EVALSHA.

Each script in ``lua/`` is sent with ``lua/common.lua`` in front of it.
redis-py's registered scripts reload themselves when the server answers
NOSCRIPT (after ``SCRIPT FLUSH`` or a restart), so a flushed cache costs one
SCRIPT LOAD per script, not an error.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from soniq_redis.cluster import is_cluster_client

SCRIPT_NAMES: tuple[str, ...] = (
    "delete_job",
    "dead_filter",
    "enqueue",
    "claim",
    "mark_started",
    "complete",
    "requeue",
    "dead_letter",
    "cancel",
    "find_stale",
    "rescue",
    "replay",
    "purge",
    "register_worker",
    "heartbeat",
    "set_worker_status",
    "list_workers",
    "queue_stats",
    "next_due",
    "expire_unknown",
    "job_counts",
    # -- schedules, leader lease, pruning
    "schedule_upsert",
    "schedule_paused",
    "schedule_remove",
    "schedule_list",
    "schedule_due",
    "schedule_fire",
    "lease_acquire",
    "lease_release",
    "lease_get",
    "prune_jobs",
    "prune_dead",
    # -- dependencies, limits, cancelling running jobs, waiting for jobs
    "claim_limited",
    "request_cancel",
    "cancel_requests",
    "finish_cancel",
    "watch",
    # -- queue pauses, steps and checkpoints
    "pause_queue",
    "resume_queue",
    "save_step",
    "save_checkpoint",
    # -- progress and job logs
    "save_progress",
    "save_job_logs",
    "job_logs",
    # -- re-sealing stored sealed values
    "sealed_rows",
    "reseal_row",
)


def script_source(name: str) -> str:
    folder = resources.files(__package__).joinpath("lua")
    common = folder.joinpath("common.lua").read_text(encoding="utf-8")
    body = folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return f"{common}\n-- {name}.lua\n{body}"


class Scripts:
    """Every script registered on one client; `run` passes the prefix as ARGV[1]."""

    def __init__(self, client: Redis, prefix: str) -> None:
        self._prefix = prefix
        self._client = client
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(script_source(name)) for name in SCRIPT_NAMES
        }

    @property
    def shas(self) -> dict[str, str]:
        return {name: script.sha for name, script in self._scripts.items()}

    async def load_all(self) -> None:
        """SCRIPT LOAD every script once, so the first calls find them cached."""
        if is_cluster_client(self._client):  # no pipelined SCRIPT LOAD there; each call reaches every master
            for script in self._scripts.values():
                await self._client.script_load(script.script)
            return
        async with self._client.pipeline(transaction=False) as pipe:
            for script in self._scripts.values():
                pipe.script_load(script.script)
            await pipe.execute()

    async def run(self, name: str, *args: str | int) -> Any:
        # The one declared key routes the call to the namespace's slot on a Redis Cluster.
        return await self._scripts[name](keys=[self._prefix + "schema"], args=[self._prefix, *args])
