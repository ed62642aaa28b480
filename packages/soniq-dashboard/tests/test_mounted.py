"""The dashboard mounted under a path in a host Starlette app, behind the host's own auth, over a real socket."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import uvicorn
from dash_harness import HttpClient, Store, free_port, wait_for
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from soniq import Soniq
from soniq_dashboard import create_dashboard_app


def host_authorize(request: Request) -> bool:
    # Stands in for the host's session check: the host app decides, the dashboard asks.
    return request.headers.get("x-test-user") == "admin"


@contextlib.asynccontextmanager
async def serving(dashboard: Any) -> AsyncIterator[str]:
    """The dashboard mounted at /ops/soniq in a host app, on a real socket."""
    host = Starlette(routes=[Route("/", lambda r: PlainTextResponse("host")), Mount("/ops/soniq", app=dashboard)])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(host, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    await asyncio.to_thread(wait_for, lambda: server.started, what="uvicorn started")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 10)


@pytest_asyncio.fixture
async def served(store: Store, producer: Soniq) -> AsyncIterator[str]:
    secret_url = store.url.replace("postgres@", "postgres:s3cret-pw@") if store.namespace else store.url
    dashboard_app = Soniq(secret_url)
    dashboard = create_dashboard_app(dashboard_app, writes=True, authorize=host_authorize, manage_app=True)
    async with serving(dashboard) as url:
        yield url


@pytest.mark.asyncio
async def test_links_stay_under_the_mount_path_and_the_password_is_never_shown(served: str, store: Store) -> None:
    client = HttpClient(served + "/ops/soniq")
    status, body = await asyncio.to_thread(client.get, "/")
    assert status == 200
    hrefs = re.findall(r'href="([^"]+)"', body)
    assert hrefs
    assert all(h.startswith("/ops/soniq/") or h.startswith("#") for h in hrefs), hrefs
    assert "s3cret-pw" not in body
    static = await asyncio.to_thread(client.get, "/static/dashboard.js")
    assert static[0] == 200


@pytest.mark.asyncio
async def test_writes_follow_the_host_apps_authorize(served: str, producer: Soniq) -> None:
    job_id = await producer.enqueue("dash_jobs.quick", n=1)
    client = HttpClient(served + "/ops/soniq")
    token = await asyncio.to_thread(client.csrf)
    form = {"csrf_token": token}
    path = f"/jobs/{job_id}/cancel"

    refused: Any = await asyncio.to_thread(client.post, path, form)
    assert refused[0] == 403
    assert (await producer.get_job(job_id))["status"] == "queued"  # type: ignore[index]

    allowed: Any = await asyncio.to_thread(client.post, path, form, {"x-test-user": "admin"})
    assert allowed[0] == 200  # the redirect to the job page, followed
    assert (await producer.get_job(job_id))["status"] == "cancelled"  # type: ignore[index]


@pytest.mark.asyncio
async def test_the_overview_shows_its_snapshot_time_and_catches_up_with_a_new_job(served: str, producer: Soniq) -> None:
    client = HttpClient(served + "/ops/soniq")
    status, body = await asyncio.to_thread(client.get, "/")
    assert status == 200
    assert "Counts as of " in body
    first_as_of = re.search(r'data-as-of="([^"]+)"', body)
    assert first_as_of is not None
    queued = re.search(r'data-count="due">(\d+)<', body)
    assert queued is not None
    await producer.enqueue("dash_jobs.quick", n=1)
    want = int(queued.group(1)) + 1

    def caught_up() -> bool:
        _, fragment = client.get("/?partial=live")
        found = re.search(r'data-count="due">(\d+)<', fragment)
        stamp = re.search(r'data-as-of="([^"]+)"', fragment)
        return (
            found is not None
            and int(found.group(1)) == want
            and stamp is not None
            and stamp.group(1) > first_as_of.group(1)
        )

    await asyncio.to_thread(wait_for, caught_up, what="the overview snapshot counting the new job")


@pytest.mark.asyncio
async def test_the_dashboard_serves_the_prometheus_series_of_its_store(store: Store, producer: Soniq) -> None:
    from prometheus_client import CollectorRegistry
    from prometheus_client.parser import text_string_to_metric_families

    from soniq_prometheus import PrometheusMetricsSink

    await producer.enqueue_many("dash_jobs.quick", [{"n": i} for i in range(3)])
    dashboard_app = Soniq(store.url, extra_observers=[PrometheusMetricsSink(registry=CollectorRegistry())])
    async with serving(create_dashboard_app(dashboard_app, manage_app=True)) as url:
        status, body = await asyncio.to_thread(HttpClient(url + "/ops/soniq").get, "/metrics")
    assert status == 200
    families = {family.name: family for family in text_string_to_metric_families(body)}
    queued = [s.value for s in families["soniq_queue_jobs"].samples if s.labels.get("state") == "queued"]
    assert sum(queued) >= 3
    assert [s.value for s in families["soniq_queue_gauges_up"].samples] == [1.0]


@pytest.mark.asyncio
async def test_metrics_is_404_with_a_hint_when_no_exporter_is_installed_for_the_app(served: str) -> None:
    status, body = await asyncio.to_thread(HttpClient(served + "/ops/soniq").get, "/metrics")
    assert status == 404
    assert "pip install soniq-prometheus" in body
