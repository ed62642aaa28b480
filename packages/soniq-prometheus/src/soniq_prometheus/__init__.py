"""Prometheus metrics for Soniq: job series compatible with soniq 0.1.0, shutdown, nack and
stale-recovery series, and queue gauges read from the store at scrape time.

Installed means on: the ``prometheus`` entry in ``soniq.observers`` gives every `Soniq` app a
`PrometheusMetricsSink` over a registry of its own, and a worker started with
``soniq worker --metrics-port N`` (or ``SONIQ_METRICS_PORT``) serves it on ``/metrics`` until
STOPPED. `metrics_response` renders a sink for an endpoint of your own (the dashboard's).
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from soniq_prometheus.queue_gauges import QueueGaugeCollector
from soniq_prometheus.server import MetricsServer
from soniq_prometheus.sink import PrometheusMetricsSink, create_observer


def find_sink(app: object) -> PrometheusMetricsSink | None:
    """The sink among `app`'s observers (or its `metrics_sink`), if any."""
    for candidate in (*getattr(app, "observers", ()), getattr(app, "metrics", None)):
        if isinstance(candidate, PrometheusMetricsSink):
            return candidate
    return None


def metrics_response(sink: PrometheusMetricsSink) -> tuple[bytes, str]:
    """The exposition body and its content type, for serving from another web app."""
    return generate_latest(sink.registry), CONTENT_TYPE_LATEST


__all__ = [
    "MetricsServer",
    "PrometheusMetricsSink",
    "QueueGaugeCollector",
    "create_observer",
    "find_sink",
    "metrics_response",
]
__version__ = "0.2.0"
