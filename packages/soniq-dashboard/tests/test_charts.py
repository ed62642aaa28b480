"""The charts' data: series a real worker's runs fill, on SQLite and Postgres; the depth ring; the fallback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from dash_harness import Dashboard, HttpClient, Store, Worker, free_port, until, wait_for
from starlette.applications import Starlette

from soniq import Soniq
from soniq.records import ActivityBucket
from soniq_dashboard import charts, create_dashboard_app
from soniq_dashboard.charts import DepthHistory, activity_series


def fetch_json(client: HttpClient, path: str) -> dict[str, Any]:
    status, body = client.get(path)
    assert status == 200, body
    data: dict[str, Any] = json.loads(body)
    return data


@pytest.mark.asyncio
@pytest.mark.slow
async def test_chart_series_count_what_a_real_worker_ran_and_the_queue_depth_it_left(
    store: Store, producer: Soniq, tmp_path: Path, processes: list[Any]
) -> None:
    d = Dashboard(store, tmp_path)
    processes.append(d)
    client = HttpClient(d.base)
    # Queued for later: the worker leaves them be, so this queue's depth stays 4 while the rest runs.
    later = datetime.now(UTC) + timedelta(hours=1)
    await producer.enqueue_many("dash_jobs.quick", [{"n": i} for i in range(4)], queue="later", scheduled_at=later)
    processes.append(Worker(store, tmp_path))
    done_ids = await producer.enqueue_many("dash_jobs.quick", [{"n": i} for i in range(5)])
    dead_ids = await producer.enqueue_many("dash_jobs.flaky", [{"flag": str(tmp_path / "never")} for _ in range(3)])

    async def all_settled() -> bool:
        done = [await producer.get_job(i) for i in done_ids]
        dead = [await producer.dead_letter.get(i) for i in dead_ids]
        return all(r is not None and r["status"] == "done" for r in done) and all(r is not None for r in dead)

    await until(all_settled, what="5 jobs done and 3 dead-lettered by the worker")

    def settled_series() -> dict[str, Any] | None:
        data = fetch_json(client, "/charts/data")
        hour = data["activity"]["hour"]
        depth = data["depth"]
        if sum(hour["done"]) < 5 or sum(hour["dead_lettered"]) < 3 or not depth["t"]:
            return None
        if depth["queues"].get("later", [None])[-1] != 4:
            return None
        return data

    data = await asyncio.to_thread(wait_for, settled_series, timeout=30, what="the charts' series")
    hour, day = data["activity"]["hour"], data["activity"]["day"]
    assert (sum(hour["done"]), sum(hour["dead_lettered"])) == (5, 3)
    assert (sum(day["done"]), sum(day["dead_lettered"])) == (5, 3)
    assert hour["failed"] is None  # no store records retried runs
    assert day["failed"] is None
    assert (hour["bucket_seconds"], day["bucket_seconds"]) == (60, 600)
    assert len(hour["t"]) == len(hour["done"]) == len(hour["dead_lettered"]) == 60
    assert len(day["t"]) == len(day["done"]) == 145  # a day and the minute under way, in tens from the newest
    assert hour["t"] == sorted(hour["t"])
    assert day["t"][-1] <= datetime.now(UTC).timestamp() <= day["t"][-1] + 600
    # The runs all fell in the last few minutes: the newest buckets hold them.
    assert sum(hour["done"][-10:]) == 5
    depth = data["depth"]
    assert len(depth["t"]) == len(depth["queues"]["later"])
    assert depth["capacity"] == charts.DEPTH_CAPACITY
    assert depth["spacing_seconds"] == charts.DEPTH_SPACING
    # The default queue drained to nothing: its line, when drawn, ends at 0.
    assert depth["queues"].get("default", [0])[-1] == 0

    # The page itself: the numbers as text under the charts, and uPlot's files from the package.
    status, page = client.get("/charts")
    assert status == 200
    assert 'src="/static/vendor/uplot/uPlot.iife.min.js"' in page
    assert 'data-src="/charts/data"' in page
    assert '<span data-depth="later">later 4</span>' in page
    assert client.get("/static/vendor/uplot/uPlot.iife.min.js")[0] == 200
    assert client.get("/static/vendor/uplot/LICENSE")[0] == 200


@pytest.mark.asyncio
async def test_the_chart_data_is_read_only_and_under_the_pages_csp(store: Store, producer: Soniq) -> None:
    async with serving(create_dashboard_app(Soniq(store.url), manage_app=True, poll_interval=0.2)) as url:
        client = HttpClient(url)
        request_headers = await asyncio.to_thread(_headers, url + "/charts/data")
        assert request_headers["content-type"] == "application/json"
        assert "script-src 'self'" in request_headers["content-security-policy"]
        assert request_headers["cache-control"] == "no-store"
        status, _ = await asyncio.to_thread(client.post, "/charts/data", {"x": "1"})
        assert status == 405


def _headers(url: str) -> dict[str, str]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as response:
        return {k.lower(): v for k, v in response.headers.items()}


@contextlib.asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[str]:
    """`app` under uvicorn on a real socket, in a thread."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    await asyncio.to_thread(wait_for, lambda: server.started, what="uvicorn started")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 10)


@pytest.mark.asyncio
async def test_without_the_chart_library_the_page_says_so_and_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As installed from a build that could not fetch uPlot: its folder is empty.
    monkeypatch.setattr(charts, "VENDOR", tmp_path / "no-uplot")
    url = f"sqlite:///{tmp_path}/charts.db"
    async with serving(create_dashboard_app(Soniq(url), manage_app=True, poll_interval=0.2)) as base:
        client = HttpClient(base)
        status, page = await asyncio.to_thread(client.get, "/charts")
        assert status == 200
        assert "The chart library (uPlot) is not installed" in page
        assert "uPlot.iife.min.js" not in page
        assert "charts.js" not in page
        assert 'data-window="last hour"' in page  # the numbers are still there, as text
        assert (await asyncio.to_thread(client.get, "/charts/data"))[0] == 200
        assert (await asyncio.to_thread(client.get, "/"))[0] == 200


def test_the_depth_ring_is_bounded_spaced_and_breaks_at_gaps() -> None:
    history = DepthHistory(capacity=5, spacing=2.0, max_queues=2)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert history.record(start, {"a": 3, "b": 0})
    assert not history.record(start + timedelta(seconds=1), {"a": 9})  # closer than the spacing: skipped
    for i in range(1, 8):
        history.record(start + timedelta(seconds=2 * i), {"a": i, "b": 10 * i, "c": 1})
    assert len(history) == 5  # the oldest fell out
    series = history.series(max_queues=1)
    assert series["queues"] == {"b": [30, 40, 50, 60, 70]}  # only the deepest drawn; "c" was never kept
    assert series["more_queues"] == 1  # "a"
    assert series["t"] == [(start + timedelta(seconds=s)).timestamp() for s in (6, 8, 10, 12, 14)]

    # Nobody watched for ten minutes: a None point between the two samples breaks the line.
    history.record(start + timedelta(minutes=10), {"b": 1})
    after = history.series()
    assert after["queues"]["b"][-3:] == [70, None, 1]
    assert len(after["t"]) == len(after["queues"]["b"]) == 6
    with pytest.raises(ValueError):
        DepthHistory(capacity=0)


def test_the_day_is_summed_in_tens_from_the_newest_minute_and_keeps_every_count() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    minutes = [
        ActivityBucket(start=start + timedelta(minutes=i), done=i % 3, dead_lettered=1 if i % 7 == 0 else 0)
        for i in range(1441)
    ]
    series = activity_series(minutes)
    hour, day = series["hour"], series["day"]
    assert hour["done"] == [b.done for b in minutes[-60:]]
    assert day["bucket_seconds"] == 600
    assert len(day["t"]) == 145
    assert day["t"][-1] == minutes[-10].start.timestamp()  # the newest ten minutes, the one under way included
    assert day["t"][0] == minutes[0].start.timestamp()
    assert sum(day["done"]) == sum(b.done for b in minutes)
    assert sum(day["dead_lettered"]) == sum(b.dead_lettered for b in minutes)
    assert day["failed"] is None
    recorded = activity_series([ActivityBucket(start=start, done=1, failed=2)])
    assert recorded["hour"]["failed"] == [2]
    assert recorded["day"]["failed"] == [2]
