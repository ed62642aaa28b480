"""Fill a SQLite store through real workers, serve `soniq dashboard`, and photograph each page.

Run it with `scripts/dashboard-screenshots`; the PNGs land in docs/dashboard/.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.request import urlopen

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "packages/soniq-dashboard/tests"))

from dash_harness import Dashboard, Process, Store, child_env, start_browser, wait_for  # noqa: E402

from soniq import Soniq  # noqa: E402

OUT = ROOT / "docs/dashboard"
JOBS = """
import asyncio, os
from soniq import JobContext, Soniq

app = Soniq()

@app.job(name="emails.send_welcome", queue="emails")
async def send_welcome(user_id: int) -> dict:
    return {"sent_to": user_id}

@app.job(name="media.make_thumbnail", queue="thumbnails", max_retries=0)
def make_thumbnail(path: str) -> str:
    if path.endswith(".tiff"):
        raise ValueError(f"unsupported image format for {path}: TIFF needs the imaging extra")
    return path + ".thumb.png"

@app.job(name="reports.monthly", queue="reports")
async def monthly(ctx: JobContext, month: str) -> None:
    ctx.logger.info("collecting invoices for %s", month)
    ctx.logger.warning("customer 4711 has no billing address; skipped")
    await ctx.progress(1250, 10000, message=f"invoices for {month}")
    ctx.logger.info("rendered 1250 of 10000 invoices")
    open(os.environ["SHOTS_MARKER"], "w").close()
    await asyncio.sleep(3600)

@app.job(name="emails.send_digest", queue="emails")
async def send_digest() -> int:
    return 0

@app.job(name="video.transcode", queue="video")
async def transcode(path: str) -> None:
    open(os.environ["SHOTS_MARKER"], "w").close()
    await asyncio.sleep(3600)
"""


def stub(**kwargs: Any) -> None:
    raise AssertionError("runs in the worker")


async def fill(store: Store) -> None:
    app = store.app()
    app.job(name="emails.send_welcome", queue="emails")(stub)
    # The producer's definition sets the row's retry budget: no retries, so bad scans dead-letter at once.
    app.job(name="media.make_thumbnail", queue="thumbnails", max_retries=0)(stub)
    app.job(name="reports.monthly", queue="reports")(stub)
    await app.setup()
    await app.enqueue_many("emails.send_welcome", [{"user_id": 1000 + i} for i in range(36)])
    await app.enqueue_many("media.make_thumbnail", [{"path": f"/uploads/{i}.jpg"} for i in range(12)])
    await app.enqueue_many("media.make_thumbnail", [{"path": f"/uploads/scan-{i}.tiff"} for i in range(3)])
    await app.enqueue("reports.monthly", month="2026-11")
    await app.close()


def producer(store: Store) -> Soniq:
    app = store.app()
    for name, queue in (
        ("emails.send_welcome", "emails"),
        ("emails.send_digest", "emails"),
        ("reports.monthly", "reports"),
        ("video.transcode", "video"),
    ):
        app.job(name=name, queue=queue)(stub)
    return app


async def add_schedules(store: Store) -> None:
    """A schedule that fires every few seconds (the worker's scheduler runs it) and a monthly one not yet due."""
    app = producer(store)
    await app.scheduler.add("emails.send_digest", every=3, name="digest")
    await app.scheduler.add("reports.monthly", cron="0 6 1 * *", args={"month": "next"}, name="monthly-report")
    await app.close()


async def fired(store: Store, name: str, times: int) -> bool:
    app = producer(store)
    try:
        view = await app.scheduler.get(name)
        return view is not None and int(view["run_count"]) >= times
    finally:
        await app.close()


async def enqueue_video(store: Store) -> None:
    app = producer(store)
    await app.enqueue("video.transcode", path="/uploads/launch.mov")
    await app.close()


async def enqueue_later(store: Store) -> None:
    app = store.app()
    app.job(name="emails.send_welcome", queue="emails")(stub)
    await app.enqueue_many("emails.send_welcome", [{"user_id": 2000 + i} for i in range(5)], scheduled_at=3600)
    await app.close()


def viewport(browser: Any, width: int, height: int) -> None:
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)


def shoot(browser: Any, url: str, path: Path, *, width: int = 1280, dark: bool = False) -> None:
    viewport(browser, width, 800)
    scheme = "dark" if dark else "light"
    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]}
    )
    browser.get(url)
    # Blank the "Updated" stamp and wait for a live refresh to write it again: the picture shows the polled
    # state. A finished job's page (data-live-final) does not poll, so it is taken as it loaded.
    if not browser.execute_script("return document.querySelector('[data-live-final]') !== null;"):
        browser.execute_script("var s = document.getElementById('live-status'); if (s) { s.textContent = ''; }")
        wait_for(
            lambda: browser.execute_script(
                "var s = document.getElementById('live-status'); return !s || s.textContent.length > 0;"
            ),
            timeout=20,
            what=f"a live refresh of {url}",
        )
    height = int(browser.execute_script("return document.documentElement.scrollHeight"))
    viewport(browser, width, min(max(height, 500), 1400))
    browser.save_screenshot(str(path))
    print(f"wrote {path.relative_to(ROOT)}")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "shots_jobs.py").write_text(JOBS)
        store = Store(f"sqlite:///{work}/shots.db", None)
        asyncio.run(fill(store))
        env = child_env(store, SONIQ_POLL_INTERVAL="0.1", SONIQ_HEARTBEAT_INTERVAL="0.5")
        env["PYTHONPATH"] = str(work) + ":" + env["PYTHONPATH"]
        worker = [sys.executable, "-m", "soniq", "worker", "--jobs-modules", "shots_jobs"]
        done = Process([*worker, "--queues", "emails,thumbnails", "--run-once"], env, work / "w1.log", work)
        wait_for(lambda: done.proc.poll() is not None, timeout=60, what="the run-once worker")
        marker = work / "marker"
        env_long = {**env, "SHOTS_MARKER": str(marker), "SONIQ_SHUTDOWN_TIMEOUT": "600"}
        draining = Process([*worker, "--queues", "reports", "--concurrency", "1"], env_long, work / "w2.log", work)
        wait_for(marker.exists, timeout=30, what="the long report running")
        # A worker killed while it runs a transcode; the emails worker, which judges two seconds of silence
        # stale, sweeps it: the workers page shows it LOST, with the row recovery took from it.
        video_marker = work / "video-marker"
        asyncio.run(enqueue_video(store))
        env_video = {**env, "SHOTS_MARKER": str(video_marker)}
        killed = Process([*worker, "--queues", "video", "--concurrency", "1"], env_video, work / "w4.log", work)
        wait_for(video_marker.exists, timeout=30, what="the transcode running")
        killed.signal(signal.SIGKILL)
        killed.wait(10)
        asyncio.run(add_schedules(store))
        env_sweeper = {**env, "SONIQ_HEARTBEAT_TIMEOUT": "2"}
        running = Process([*worker, "--queues", "emails"], env_sweeper, work / "w3.log", work)
        asyncio.run(enqueue_later(store))
        dashboard = Dashboard(store, work, writes=True)
        browser = start_browser(work / "profile")
        try:
            base = dashboard.base
            wait_for(lambda: b'data-state="LOST"' in urlopen(base + "/workers").read(), timeout=30, what="lost")
            wait_for(lambda: asyncio.run(fired(store, "digest", 2)), timeout=30, what="the schedule firing")
            draining.signal(signal.SIGTERM)
            wait_for(lambda: b"DRAINING" in urlopen(base + "/workers").read(), timeout=20, what="draining")
            shoot(browser, base + "/", OUT / "overview.png")
            shoot(browser, base + "/", OUT / "overview-dark.png", dark=True)
            shoot(browser, base + "/jobs", OUT / "jobs.png")
            shoot(browser, base + "/jobs?status=queued", OUT / "jobs-narrow.png", width=420)
            from selenium.webdriver.common.by import By

            browser.get(base + "/dead-letters")
            dead = browser.find_element(By.CSS_SELECTOR, "tr[data-job-id]").get_attribute("data-job-id")
            shoot(browser, base + "/dead-letters", OUT / "dead-letters.png")
            # The running report: its progress bar and its log, as an operator sees them during a deploy.
            browser.get(base + "/jobs?status=processing&queue=reports")
            running_id = browser.find_element(By.CSS_SELECTOR, "tr[data-job-id]").get_attribute("data-job-id")
            shoot(browser, base + f"/jobs/{running_id}", OUT / "job-detail.png")
            shoot(browser, base + f"/jobs/{dead}", OUT / "dead-letter-detail.png")
            shoot(browser, base + "/dead-letters/confirm?action=replay", OUT / "confirm.png")
            shoot(browser, base + "/workers", OUT / "workers.png")
            shoot(browser, base + "/workers", OUT / "workers-dark.png", dark=True)
            shoot(browser, base + "/schedules", OUT / "schedules.png")
            # charts.png in docs/ was taken by hand over a longer history than this script makes; --charts
            # replaces it with this run's picture.
            if "--charts" in sys.argv[1:]:
                shoot(browser, base + "/charts", OUT / "charts.png")
        finally:
            browser.quit()
            for p in (dashboard, draining, running, killed, done):
                p.stop()


if __name__ == "__main__":
    main()
