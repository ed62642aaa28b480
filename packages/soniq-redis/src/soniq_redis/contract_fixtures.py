"""What soniq-redis lends the contract suite (entry-point group ``soniq_contract_tests.fixtures``).

The suite reads `backend_class` and `corrupt_row` from this module; it imports nothing from the
suite. Redis cannot join a caller's transaction (`transactional_enqueue` is False), so there is no
``transaction``.
"""

from __future__ import annotations

from soniq_redis.backend import RedisBackend

backend_class = RedisBackend


async def corrupt_row(backend: RedisBackend, job_id: str, raw_args: str) -> None:
    """Overwrite the ``args`` field of the job's hash with `raw_args`, on a client of its own."""
    client = backend._target.client()
    try:
        key = backend.keys.job(job_id)
        if not await client.exists(key):
            raise AssertionError(f"no Redis hash {key!r} for job {job_id}")
        await client.hset(key, "args", raw_args)
    finally:
        await client.aclose()
