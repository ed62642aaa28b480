"""soniq-redis on a real Redis Cluster: URLs, start-up checks, one slot per namespace, failover.

The cluster is three masters with a replica each on loopback ports, started by
``bash scripts/servers start cluster`` (``SONIQ_TEST_REDIS_CLUSTER_URL``, default
``redis+cluster://127.0.0.1:7000``). The missing-slots check builds a private
one-node cluster of its own.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from soniq.errors import BackendUnavailableError, InvalidURLError
from soniq.params import (
    ClaimJobsParams,
    CompleteJobsParams,
    DeadLetterJobParams,
    EnqueueJobsParams,
    GetJobParams,
    GroupLimit,
    JobCountsParams,
    JobResult,
    LimitScope,
    MarkStartedParams,
    WaitForJobChangesParams,
    WatchJobsParams,
)
from soniq.records import JobStatus
from soniq_contract_tests.chaos import ChaosConfig, run_chaos
from soniq_redis import RedisBackend

CLUSTER_URL = os.environ.get("SONIQ_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000")
START_HINT = "start one with: bash scripts/servers start cluster"

pytestmark = pytest.mark.asyncio


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true, so this fails instead of skipping)")
    pytest.skip(reason)


def _seed() -> tuple[str, int]:
    parts = urlsplit(CLUSTER_URL)
    return parts.hostname or "127.0.0.1", parts.port or 7000


@pytest.fixture(scope="session")
def cluster_url() -> str:
    host, port = _seed()

    async def state() -> str:
        client = Redis(host=host, port=port, decode_responses=True, socket_connect_timeout=2)
        try:
            info = await client.cluster("INFO")
            return str(info.get("cluster_state", "?"))
        finally:
            await client.aclose()

    try:
        found = asyncio.run(state())
    except Exception as exc:
        _unavailable(f"no Redis Cluster at {host}:{port} ({exc}); {START_HINT}")
        raise AssertionError("unreachable") from None
    if found != "ok":
        _unavailable(f"the Redis Cluster at {host}:{port} is not ok (cluster_state:{found}); {START_HINT}")
    return CLUSTER_URL


@pytest_asyncio.fixture
async def cluster_backend(cluster_url: str) -> AsyncIterator[RedisBackend]:
    backend = RedisBackend.from_url(cluster_url, namespace=f"cl_{uuid.uuid4().hex[:10]}")
    await backend.connect()
    try:
        yield backend
    finally:
        await backend.drop_schema()
        await backend.close()


def _job(queue: str = "default") -> object:
    from datetime import UTC, datetime, timedelta

    from soniq.records import NewJob

    return NewJob(
        id=str(uuid.uuid4()),
        job_name="tests.job",
        args={"n": 1},
        queue=queue,
        priority=100,
        scheduled_at=datetime.now(UTC) - timedelta(seconds=1),
        max_attempts=3,
    )


# -- URLs and bad input (no server needed) -----------------------------------


async def test_a_cluster_url_says_cluster_and_keeps_the_default_namespace_in_one_slot() -> None:
    backend = RedisBackend.from_url("redis+cluster://example.invalid:7000")
    assert "cluster=True" in repr(backend._target)
    assert backend.keys.prefix == "soniq:{default}:"
    assert RedisBackend.from_url("redis://example.invalid:7000", cluster=True).keys.prefix == "soniq:{default}:"
    assert RedisBackend.from_url("redis://example.invalid:7000").keys.prefix == "soniq:"


async def test_a_url_naming_both_modes_is_refused() -> None:
    with pytest.raises(InvalidURLError, match="names two modes"):
        RedisBackend.from_url("redis+cluster://example.invalid:7000?cluster=false")
    with pytest.raises(InvalidURLError, match="names two modes"):
        RedisBackend.from_url("redis+cluster://example.invalid:7000", cluster=False)


async def test_a_cluster_url_with_a_database_number_is_refused() -> None:
    with pytest.raises(InvalidURLError, match=r"only database 0.*names database 15"):
        RedisBackend.from_url("redis+cluster://example.invalid:7000/15")


async def test_an_unknown_scheme_suffix_is_refused() -> None:
    with pytest.raises(InvalidURLError, match=r"redis\+cluster://"):
        RedisBackend.from_url("redis+sentinel://example.invalid:26379")


# -- start-up checks ----------------------------------------------------------


async def test_a_plain_url_to_a_cluster_node_is_refused_at_connect(cluster_url: str) -> None:
    host, port = _seed()
    backend = RedisBackend.from_url(f"redis://{host}:{port}/0", namespace="plain_on_cluster")
    with pytest.raises(InvalidURLError, match=r"is a Redis Cluster node.*redis\+cluster://"):
        await backend.connect()
    await backend.close()


def _port_with_free_cluster_bus() -> int:
    """A free port whose cluster bus port (port + 10000) is free and below 65536 too."""
    import socket

    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise AssertionError("no free port pair (port, port + 10000) for a private cluster node")


@pytest.fixture
def half_cluster() -> Iterator[int]:
    """A private one-node cluster that serves only slots 0-8191."""
    binary = shutil.which("redis-server")
    if binary is None:
        _unavailable("redis-server is not installed (apt-get install redis-server)")
    port = _port_with_free_cluster_bus()
    with tempfile.TemporaryDirectory(prefix="soniq-half-cluster-") as workdir:
        process = subprocess.Popen(
            [
                *(str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
                *("--cluster-enabled", "yes", "--cluster-config-file", str(Path(workdir) / "nodes.conf")),
            ],
            cwd=workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            give_up = time.monotonic() + 60
            while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() != b"PONG":
                assert process.poll() is None, f"the private cluster node on port {port} exited {process.returncode}"
                assert time.monotonic() < give_up, "the private cluster node did not start"
                time.sleep(0.05)
            subprocess.run(["redis-cli", "-p", str(port), "cluster", "addslotsrange", "0", "8191"], check=True)
            yield port
        finally:
            process.terminate()
            process.wait(timeout=10)


async def test_a_cluster_missing_slots_is_refused_at_connect(half_cluster: int) -> None:
    backend = RedisBackend.from_url(f"redis+cluster://127.0.0.1:{half_cluster}", namespace="half")
    with pytest.raises(BackendUnavailableError, match=r"does not serve every hash slot.*8192 of 16384") as caught:
        await backend.connect()
    assert "redis-cli --cluster fix" in str(caught.value)
    await backend.close()


# -- one namespace, one slot ----------------------------------------------------


async def _all_keys(backend: RedisBackend) -> list[str]:
    client = backend._client
    assert client is not None
    return [key async for key in client.scan_iter(match=backend.keys.scan_pattern)]


async def test_every_key_a_namespace_writes_lives_in_its_one_slot(cluster_backend: RedisBackend) -> None:
    backend = cluster_backend
    jobs = [_job(queue=f"q{n % 3}") for n in range(30)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs))  # type: ignore[arg-type]
    claimed = await backend.claim_jobs(ClaimJobsParams(queues=None, limit=10, worker_id="w1", mark_started=False))
    assert len(claimed) == 10
    await backend.mark_started(MarkStartedParams(job_ids=[job.id for job in claimed], worker_id="w1"))
    await backend.complete_jobs(
        CompleteJobsParams(results=[JobResult(job.id, None) for job in claimed[:5]], worker_id="w1")
    )
    await backend.dead_letter_job(
        DeadLetterJobParams(job_id=claimed[5].id, worker_id="w1", error="boom", reason="max_retries")
    )
    keys = await _all_keys(backend)
    assert len(keys) > 30  # job hashes, queues, worker rows, dead letters, the schema key
    client = backend._client
    assert client is not None
    slots = {await client.cluster_keyslot(key) for key in keys}  # type: ignore[attr-defined]
    assert len(slots) == 1, f"the namespace's keys spread over slots {sorted(slots)}"


async def test_dependency_and_limit_keys_share_the_slot_and_job_changes_reach_a_waiter(
    cluster_url: str, cluster_backend: RedisBackend
) -> None:
    """Dependency edges, job-limit sets, rate windows and the job-changes channel work on a cluster."""
    from soniq.records import NewJob

    backend = cluster_backend
    first = _job()
    assert isinstance(first, NewJob)
    second = NewJob(
        id=str(uuid.uuid4()),
        job_name=first.job_name,
        args={},
        queue=first.queue,
        priority=100,
        scheduled_at=first.scheduled_at,
        max_attempts=3,
        depends_on=(first.id,),
    )
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=[first, second]))
    limits = [
        GroupLimit(LimitScope.JOB, "tests.job", max_concurrent=5),
        GroupLimit(LimitScope.QUEUE, "default", rate_limit=5, rate_period=60.0),
    ]
    [row] = await backend.claim_jobs(
        ClaimJobsParams(queues=None, limit=10, worker_id="w1", mark_started=True, limits=limits)
    )
    assert row.id == first.id
    keys = await _all_keys(backend)
    client = backend._client
    assert client is not None
    for kind in (":dependents:", ":pj:", ":lrate:", ":limited_jobs"):
        assert any(kind in key for key in keys), f"no {kind} key among {sorted(keys)}"
    slots = {await client.cluster_keyslot(key) for key in keys}  # type: ignore[attr-defined]
    assert len(slots) == 1, f"the namespace's keys spread over slots {sorted(slots)}"

    other = RedisBackend.from_url(cluster_url, namespace=backend.keys.namespace)
    await other.connect()
    try:
        await other.watch_jobs(WatchJobsParams(job_ids=[row.id]))
        waiting = asyncio.create_task(other.wait_for_job_changes(WaitForJobChangesParams([row.id], 30.0)))
        await asyncio.sleep(0.1)
        await backend.complete_jobs(CompleteJobsParams(results=[JobResult(row.id, None)], worker_id="w1"))
        assert await asyncio.wait_for(waiting, 10.0) == {row.id}
    finally:
        await other.close()
    [after] = await backend.claim_jobs(ClaimJobsParams(queues=None, limit=10, worker_id="w1", mark_started=True))
    assert after.id == second.id


# -- failover -------------------------------------------------------------------


async def _failover_master_of(backend: RedisBackend) -> tuple[str, str]:
    """Promote the replica of the master holding `backend`'s namespace; return (old, new) master."""
    client = backend._client
    assert client is not None
    slot = await client.cluster_keyslot(backend.keys.schema)  # type: ignore[attr-defined]
    host, port = _seed()
    # The replica of an earlier failover may still be rejoining: wait for the master to have one.
    replica_wait = time.monotonic() + 60
    while True:
        seed = Redis(host=host, port=port, decode_responses=True)
        try:
            nodes = str(await seed.execute_command("CLUSTER", "NODES"))
        finally:
            await seed.aclose()
        rows = [line.split() for line in nodes.splitlines() if line.strip()]
        master = next(
            row
            for row in rows
            if "master" in row[2] and "fail" not in row[2] and any(_in_range(slot, spec) for spec in row[8:])
        )
        found = next((row for row in rows if row[3] == master[0] and "fail" not in row[2]), None)
        if found is not None:
            replica = found
            break
        assert time.monotonic() < replica_wait, f"master {master[1]} has no healthy replica after 60 s"
        await asyncio.sleep(0.5)
    address = replica[1].split("@", 1)[0]
    replica_host, replica_port = address.rsplit(":", 1)
    node = Redis(host=replica_host, port=int(replica_port), decode_responses=True)
    try:
        # A manual failover aborts when the replica cannot catch up in time (a loaded
        # machine): ask again every few seconds, as an operator would.
        give_up = time.monotonic() + 90
        while True:
            await node.execute_command("CLUSTER", "FAILOVER")
            asked = time.monotonic()
            while time.monotonic() - asked < 6:
                if (await node.execute_command("ROLE"))[0] == "master":
                    return master[1].split("@", 1)[0], address
                await asyncio.sleep(0.05)
            assert time.monotonic() < give_up, f"replica {address} was not promoted"
    finally:
        await node.aclose()


def _in_range(slot: int, spec: str) -> bool:
    if spec.startswith("["):
        return False
    low, _, high = spec.partition("-")
    return int(low) <= slot <= int(high or low)


async def test_a_master_failover_loses_no_job(cluster_url: str, cluster_backend: RedisBackend) -> None:
    backend = cluster_backend
    jobs = [_job() for _ in range(200)]
    await backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs[:100]))  # type: ignore[arg-type]
    first = await backend.claim_jobs(ClaimJobsParams(queues=None, limit=50, worker_id="w1", mark_started=True))
    await backend.complete_jobs(CompleteJobsParams(results=[JobResult(job.id, None) for job in first], worker_id="w1"))

    old, new = await _failover_master_of(backend)
    assert old != new

    # The client follows the slot to the promoted replica; a call during the switch may fail, never half-apply.
    async def retry(call: object) -> object:
        give_up = time.monotonic() + 20
        while True:
            try:
                return await call()  # type: ignore[operator]
            except BackendUnavailableError:
                assert time.monotonic() < give_up
                await asyncio.sleep(0.1)

    await retry(lambda: backend.enqueue_jobs(EnqueueJobsParams(jobs=jobs[100:])))  # type: ignore[arg-type]
    done = {job.id for job in first}
    claim = functools.partial(
        backend.claim_jobs, ClaimJobsParams(queues=None, limit=50, worker_id="w1", mark_started=True)
    )
    give_up = time.monotonic() + 30
    while len(done) < len(jobs):
        assert time.monotonic() < give_up, f"only {len(done)} of {len(jobs)} jobs completed after the failover"
        claimed = await retry(claim)
        assert isinstance(claimed, list)
        finished = CompleteJobsParams(results=[JobResult(job.id, None) for job in claimed], worker_id="w1")
        await retry(functools.partial(backend.complete_jobs, finished))
        assert done.isdisjoint(job.id for job in claimed), "a completed job was claimed again"
        done.update(job.id for job in claimed)
    for job in jobs[::20]:
        record = await backend.get_job(GetJobParams(job_id=job.id))
        assert record is not None
        assert record.status is JobStatus.DONE
    counts = await backend.job_counts(JobCountsParams())
    assert sum(row.done for row in counts) == len(jobs)
    assert sum(row.queued + row.processing + row.dead_letter for row in counts) == 0


@pytest.mark.chaos
async def test_chaos_on_the_cluster_with_master_failovers_loses_nothing(cluster_url: str, tmp_path: Path) -> None:
    namespace = f"clchaos_{uuid.uuid4().hex[:10]}"
    probe = RedisBackend.from_url(cluster_url, namespace=namespace)
    await probe.connect()

    async def fail_over() -> int:
        await _failover_master_of(probe)
        return 1

    config = ChaosConfig(
        url=cluster_url, namespace=namespace, directory=tmp_path, kill_connections=fail_over, label="redis-cluster"
    )
    try:
        report = await run_chaos(config)
    finally:
        await probe.drop_schema()
        await probe.close()
    print(report.text())
    assert report.faults["connection_kill"] > 0  # each "connection kill" here is a master failover
    assert report.violations == []
