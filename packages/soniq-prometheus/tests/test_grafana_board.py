"""The shipped Grafana board queries only series the sink exports, and covers what operators watch."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from soniq_prometheus import PrometheusMetricsSink

BOARD = Path(__file__).resolve().parents[3] / "docs" / "grafana" / "soniq.json"
SERIES = re.compile(r"\bsoniq_[a-zA-Z0-9_]+")


def queries(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, child in node.items():
            # A `query` string that is a function call (label_values) is PromQL; "prometheus" is a plugin id.
            if isinstance(child, str) and (key in ("expr", "definition") or (key == "query" and "(" in child)):
                yield child
            else:
                yield from queries(child)
    elif isinstance(node, list):
        for child in node:
            yield from queries(child)


def test_every_series_the_board_queries_is_exported() -> None:
    board = json.loads(BOARD.read_text())
    exported = PrometheusMetricsSink(registry=CollectorRegistry()).metric_names()
    used = {name for query in queries(board) for name in SERIES.findall(query)}
    assert used, "the board has no queries"
    assert used <= exported, f"queried but not exported: {sorted(used - exported)}"
    # Throughput, latency, failures, queue depth and age, worker states, shutdown outcomes, schedules.
    assert {
        "soniq_jobs_completed_total",
        "soniq_job_duration_seconds_bucket",
        "soniq_dead_letters_total",
        "soniq_job_retries_total",
        "soniq_queue_jobs",
        "soniq_queue_oldest_job_age_seconds",
        "soniq_workers",
        "soniq_worker_state",
        "soniq_shutdowns_total",
        "soniq_schedule_firings_total",
        "soniq_schedule_lateness_seconds_bucket",
    } <= used


def test_every_panel_query_names_a_series() -> None:
    board = json.loads(BOARD.read_text())
    for panel in board["panels"]:
        for target in panel["targets"]:
            assert SERIES.search(target["expr"]), (panel["title"], target["expr"])
