"""URLs and options, an unreachable server, and a connection lost mid-life then recovered."""

from __future__ import annotations

import asyncio
import socket
from typing import Any
from urllib.parse import urlsplit

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from soniq.backend import Backend
from soniq.discovery import backend_class_for, create_backend
from soniq.errors import BackendUnavailableError, InvalidURLError, SoniqError
from soniq.params import ClaimJobsParams, EnqueueJobsParams, GetJobParams, PrepareWorkerParams, QueueStatsParams
from soniq.records import JobStatus
from soniq_redis import RedisBackend

pytestmark = pytest.mark.asyncio


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_entry_points_serve_both_schemes() -> None:
    assert backend_class_for("redis://127.0.0.1:6379/0") is RedisBackend
    assert backend_class_for("rediss://127.0.0.1:6380/0") is RedisBackend
    backend = create_backend("redis://127.0.0.1:6379/3", namespace="tenant")
    assert isinstance(backend, RedisBackend)
    assert isinstance(backend, Backend)


async def test_url_gives_host_port_db_and_tls() -> None:
    plain = RedisBackend.from_url("redis://example.invalid:7000/5")
    assert repr(plain) == "RedisBackend(example.invalid:7000/5, prefix='soniq:')"
    tls = RedisBackend.from_url("rediss://example.invalid/2", namespace="a")
    assert repr(tls) == "RedisBackend(example.invalid:6379/2, prefix='soniq:{a}:')"
    assert tls._target.tls is True
    assert plain._target.tls is False


async def test_soniq_options_may_come_from_the_url_and_a_keyword_wins() -> None:
    backend = RedisBackend.from_url(
        "redis://127.0.0.1/0?namespace=billing&max_connections=20&health_check_interval=5", client_name="kw"
    )
    assert backend.keys.prefix == "soniq:{billing}:"
    assert backend._target.options["max_connections"] == 20
    assert backend._target.options["client_name"] == "kw"
    # Soniq's own parameters are stripped; redis-py's stay for redis-py.
    assert backend._target.url == "redis://127.0.0.1/0?health_check_interval=5"
    overridden = RedisBackend.from_url("redis://127.0.0.1/0?namespace=billing", namespace="other")
    assert overridden.keys.prefix == "soniq:{other}:"
    with pytest.raises(InvalidURLError, match="max_connections"):
        RedisBackend.from_url("redis://127.0.0.1/0?max_connections=lots")


async def test_from_url_opens_nothing() -> None:
    # Would fail at once if from_url tried to connect.
    RedisBackend.from_url(f"redis://127.0.0.1:{_closed_port()}/0")


async def test_capabilities() -> None:
    caps = RedisBackend.from_url("redis://127.0.0.1/0").capabilities
    assert caps.push_wakeup is True
    assert caps.transactional_enqueue is False
    assert caps.shared_across_processes is True
    assert caps.timestamp_precision.total_seconds() == 1e-6
    assert set(caps.roles) == {
        "QueueStore",
        "DeadLetterStore",
        "ScheduleStore",
        "OperatorReads",
        "SchemaAdmin",
        "CancelChannel",
        "LimitStore",
        "DependencyStore",
        "RetentionStore",
        "QueuePauseStore",
        "JobStepStore",
        "VersionedJobs",
        "JobProgressStore",
        "JobLogStore",
        "UniqueWindows",
        "DebouncedJobs",
        "KeyRotationStore",
    }
    assert caps.push_job_changes is True


async def test_unknown_option_is_a_type_error_naming_it_and_the_accepted_ones() -> None:
    with pytest.raises(TypeError, match=r"colour.*accepted options: namespace, max_connections"):
        RedisBackend.from_url("redis://127.0.0.1/0", colour="blue")


@pytest.mark.parametrize("url", ["redis://127.0.0.1/notadb", "http://127.0.0.1/0", "redis://127.0.0.1:99999/0"])
async def test_bad_urls_are_rejected(url: str) -> None:
    with pytest.raises(InvalidURLError):
        RedisBackend.from_url(url)


@pytest.mark.parametrize("namespace", ["", "a{b", "c}d"])
async def test_bad_namespaces_are_rejected(namespace: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        RedisBackend.from_url("redis://127.0.0.1/0", namespace=namespace)


async def test_unreachable_server_raises_backend_unavailable_naming_host_and_port() -> None:
    port = _closed_port()
    backend = RedisBackend.from_url(f"redis://127.0.0.1:{port}/0")
    with pytest.raises(BackendUnavailableError, match=f"127.0.0.1:{port}") as caught:
        await backend.connect()
    assert isinstance(caught.value.__cause__, RedisConnectionError)
    await backend.close()


async def test_lost_connection_raises_backend_unavailable_then_recovers(private_server: Any, make_job: Any) -> None:
    backend = RedisBackend.from_url(private_server.url, namespace="lost")
    await backend.connect()
    try:
        before = make_job()
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[before]))

        private_server.stop()
        with pytest.raises(BackendUnavailableError, match=f"127.0.0.1:{private_server.port}"):
            await backend.get_job(GetJobParams(job_id=before.id))
        with pytest.raises(BackendUnavailableError):
            await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=1, mark_started=False))

        private_server.start()  # an empty server: nothing was persisted
        after = make_job()
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[after]))
        row = await backend.get_job(GetJobParams(job_id=after.id))
        assert row is not None
        assert row.status is JobStatus.QUEUED
        assert await backend.get_job(GetJobParams(job_id=before.id)) is None
    finally:
        await backend.close()


async def test_a_server_restart_between_operations_costs_no_error(private_server: Any, make_job: Any) -> None:
    backend = RedisBackend.from_url(private_server.url, namespace="restart")
    await backend.connect()
    try:
        await asyncio.gather(*(backend.queue_stats(QueueStatsParams()) for _ in range(4)))  # several pooled connections
        # In threads, so that the event loop runs on meanwhile, as it does in a live worker.
        await asyncio.to_thread(private_server.stop)
        await asyncio.to_thread(private_server.start)
        # Every pooled connection is dead; the first operation must not fail on one.
        job = make_job()
        await backend.enqueue_jobs(EnqueueJobsParams(jobs=[job]))
        [claimed] = await backend.claim_jobs(ClaimJobsParams(worker_id="w", queues=None, limit=1, mark_started=False))
        assert claimed.id == job.id
    finally:
        await backend.close()


async def test_prepare_worker_refuses_a_pool_too_small_for_the_worker(redis_url: str) -> None:
    backend = RedisBackend.from_url(redis_url, namespace="pool", max_connections=4)
    try:
        with pytest.raises(SoniqError, match=r"max_connections=4 is too small.*at least 10"):
            await backend.prepare_worker(PrepareWorkerParams(concurrency=6, prefetch=2))
    finally:
        await backend.close()


@pytest.mark.parametrize(
    "url",
    [
        "redis://:S3cretPw@127.0.0.1:notaport/0",
        "redis://app:S3cretPw@127.0.0.1/not-a-db",
        "redix://app:S3cretPw@127.0.0.1/0",
        "redis://app:S3cretPw@127.0.0.1/0?max_connections=lots",
        "redis://127.0.0.1/0?password=S3cretPw&max_connections=lots",
        "redis://app:S3cretPw@[::1/0",
    ],
)
async def test_url_errors_never_show_the_password(url: str) -> None:
    with pytest.raises(InvalidURLError) as caught:
        RedisBackend.from_url(url)
    assert "S3cretPw" not in str(caught.value)
    assert "invalid Redis URL" in str(caught.value)


async def test_reprs_of_the_backend_and_its_target_never_show_the_password() -> None:
    backend = RedisBackend.from_url("rediss://app:S3cretPw@example.invalid:6390/2?password=S3cretPw")
    for text in (repr(backend), repr(backend._target), str(backend._target)):
        assert "S3cretPw" not in text
    assert "example.invalid" in repr(backend._target)


async def test_rediss_to_a_plain_server_says_tls_is_the_likely_cause(redis_url: str) -> None:
    plain = urlsplit(redis_url)
    tls_url = f"rediss://:S3cretPw@{plain.hostname}:{plain.port or 6379}/0"
    backend = RedisBackend.from_url(tls_url, socket_connect_timeout=1.0)
    with pytest.raises(BackendUnavailableError) as caught:
        await backend.connect()
    message = str(caught.value)
    assert "TLS" in message
    assert "redis://" in message
    assert "S3cretPw" not in message
