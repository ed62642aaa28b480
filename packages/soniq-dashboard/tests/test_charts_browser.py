"""The charts page in real Chromium: uPlot, served from the package, draws under the strict CSP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dash_harness import Dashboard, Store, Worker, in_browser, until

from soniq import Soniq

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]
PLOTS = ("hour-done", "hour-failures", "day-done", "day-failures", "depth")


def legend(browser: Any, plot: str) -> str:
    from selenium.webdriver.common.by import By

    return str(browser.find_element(By.CSS_SELECTOR, f'[data-chart="{plot}"] .u-legend').text)


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_the_charts_render_with_uplot_and_no_csp_violation(
    store: Store, producer: Soniq, browser: Any, tmp_path: Path, processes: list[Any]
) -> None:
    from selenium.webdriver.common.by import By

    d = Dashboard(store, tmp_path)
    processes.append(d)
    processes.append(Worker(store, tmp_path))
    done = await producer.enqueue_many("dash_jobs.quick", [{"n": i} for i in range(6)])
    dead = await producer.enqueue_many("dash_jobs.flaky", [{"flag": str(tmp_path / "never")} for _ in range(2)])

    async def settled() -> bool:
        rows = [await producer.get_job(i) for i in done]
        letters = [await producer.dead_letter.get(i) for i in dead]
        return all(r is not None and r["status"] == "done" for r in rows) and all(r is not None for r in letters)

    await until(settled, what="the worker's runs settled")

    # What earlier pages logged is not this page's: leave them (a live poll of a dashboard an earlier
    # test stopped may still fail while it unloads), then drop their entries.
    browser.get("about:blank")
    browser.get_log("browser")
    browser.get(d.base + "/charts")
    in_browser(
        browser,
        lambda b: len(b.find_elements(By.CSS_SELECTOR, ".chart-plot .uplot canvas")) == len(PLOTS),
        what="a uPlot canvas in each chart",
    )
    for plot in PLOTS:
        assert browser.find_elements(By.CSS_SELECTOR, f'[data-chart="{plot}"] canvas'), plot
    in_browser(browser, lambda b: b.find_element(By.ID, "charts").get_attribute("data-drawn"), what="drawn")
    assert "done" in legend(browser, "hour-done")
    assert "dead-lettered" in legend(browser, "day-failures")
    assert "Charts updated" in browser.find_element(By.ID, "charts-status").text
    # What the charts drew is what the store holds: summed over the hour as the page's own JS sees it.
    sums = browser.execute_script(
        "return fetch(document.getElementById('charts').getAttribute('data-src')).then(r => r.json())"
        ".then(b => [b.activity.hour.done.reduce((a, n) => a + n, 0),"
        " b.activity.hour.dead_lettered.reduce((a, n) => a + n, 0)]);"
    )
    assert sums == [6, 2]

    # A queue that fills while the page is open gets its own line on the next samples, without a reload.
    later = datetime.now(UTC) + timedelta(hours=1)
    await producer.enqueue_many("dash_jobs.quick", [{"n": i} for i in range(3)], queue="later", scheduled_at=later)
    in_browser(browser, lambda b: "later" in legend(b, "depth"), what="the new queue's line")
    in_browser(browser, lambda b: "later 3" in b.find_element(By.ID, "live").text, what="its depth as text")

    entries = browser.get_log("browser")
    problems = [
        e["message"]
        for e in entries
        if (e["level"] == "SEVERE" or "Content Security Policy" in e["message"])
        and not (e["message"].startswith("http://") and not e["message"].startswith(d.base))
    ]
    assert problems == []
