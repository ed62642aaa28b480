"""The Soniq web dashboard: ``create_dashboard_app(app)`` and the ``soniq dashboard`` command."""

from __future__ import annotations

from soniq_dashboard.app import create_dashboard_app
from soniq_dashboard.reads import DashboardReads

__all__ = ["DashboardReads", "create_dashboard_app"]
__version__ = "0.2.0"
