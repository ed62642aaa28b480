"""`/metrics` on the dashboard when soniq-prometheus is installed: the same series a worker serves.

The dashboard is often the one long-lived web process an operator already scrapes, so it
exposes the app's Prometheus sink there too. Nothing is imported unless the page is asked for.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from soniq import Soniq
from soniq_dashboard.reads import require_dashboard_roles

logger = logging.getLogger("soniq.dashboard")

REFRESH_TIMEOUT = 5.0


class MetricsEndpoint:
    """Finds the app's `PrometheusMetricsSink` once and renders its exposition on request."""

    def __init__(self, app: Soniq) -> None:
        self.app = app
        self._sink: Any = None
        self._looked = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def _find(self) -> Any:
        if not self._looked:
            self._looked = True
            try:
                import soniq_prometheus
            except ImportError:
                return None
            self._sink = soniq_prometheus.find_sink(self.app)
        return self._sink

    async def render(self) -> tuple[bytes, str] | None:
        """The body and content type, or None when no exporter is installed for this app."""
        sink = self._find()
        if sink is None:
            return None
        import soniq_prometheus

        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            sink.attach(self.app, loop)
            self._loop = loop
        gauges = sink.queue_gauges
        if not gauges.is_fresh():
            # Read the store here, on the loop the request runs on, instead of letting the collector
            # hand the read to this same loop (which would only serve the previous values). A dashboard
            # registers no jobs, so the queues to report come from the store itself.
            try:
                backend = require_dashboard_roles(await self.app.connected_backend())
                gauges.add_queues(await backend.queue_names())
                await asyncio.wait_for(gauges.refresh(), REFRESH_TIMEOUT)
            except Exception as exc:  # the series still render, with soniq_queue_gauges_up = 0
                logger.warning("dashboard /metrics: reading queue gauges failed: %s", exc)
        body, content_type = soniq_prometheus.metrics_response(sink)
        return body, content_type
