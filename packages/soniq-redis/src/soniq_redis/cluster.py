"""Redis Cluster: redis-py's cluster client, and the checks made when connecting.

Every key of a namespace carries the namespace as a hash tag, so a namespace
lives in one hash slot on one master and each Lua script touches a single
slot. Scripts are called with the namespace's schema key as their one
declared key, which is what routes them to that master. The price is that one
namespace is served by one master: spreading queues over several namespaces
is how a fleet uses every master of the cluster.

A cluster whose slots are not all served is refused at connect, as is a
cluster node reached through a plain ``redis://`` URL (its scripts would fail
later with MOVED errors far from the cause).
"""

from __future__ import annotations

from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from soniq.backend import redact_url
from soniq.errors import BackendUnavailableError, InvalidURLError

HASH_SLOTS = 16384


def cluster_client(url: str, kwargs: dict[str, Any]) -> Redis:
    """A cluster client typed as `Redis`: the backend calls only commands both offer.

    Full slot coverage is checked by `check_cluster`, with a clearer message than
    redis-py's, so the client itself tolerates a partial map."""
    options = {name: value for name, value in kwargs.items() if name != "client_name"}
    options["require_full_coverage"] = False
    client = RedisCluster.from_url(url, **options)
    return cast(Redis, client)


def is_cluster_client(client: Any) -> bool:
    return isinstance(client, RedisCluster)


async def check_mode(client: Redis, *, cluster: bool, where: str, url: str) -> None:
    """Refuse a cluster that does not serve every slot, and a cluster node behind a plain URL."""
    if cluster:
        info = await cast(Any, client).cluster_info()
        state = info.get("cluster_state")
        assigned = int(info.get("cluster_slots_assigned", 0))
        ok = int(info.get("cluster_slots_ok", 0))
        if state != "ok" or assigned < HASH_SLOTS or ok < HASH_SLOTS:
            raise BackendUnavailableError(
                f"the Redis Cluster at {where} does not serve every hash slot (cluster_state:{state}, "
                f"{assigned} of {HASH_SLOTS} slots assigned, {ok} ok); a namespace on a missing slot would "
                f"fail, so Soniq refuses to start: repair it with redis-cli --cluster fix {where}"
            )
        return
    info = await client.info("cluster")
    if str(info.get("cluster_enabled", "0")) == "1":
        raise InvalidURLError(
            f"Redis at {where} is a Redis Cluster node, but the URL {redact_url(url)!r} asks for a single "
            "server; use redis+cluster:// (or cluster=true)"
        )
