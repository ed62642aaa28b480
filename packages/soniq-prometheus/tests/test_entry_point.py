"""Installed means on; SONIQ_OBSERVERS chooses the set; every app gets its own registry."""

from __future__ import annotations

import pytest

from soniq import Soniq
from soniq_prometheus import PrometheusMetricsSink, find_sink


def test_installed_means_on_and_soniq_observers_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SONIQ_OBSERVERS", raising=False)
    first, second = find_sink(Soniq("memory://")), find_sink(Soniq("memory://"))
    assert isinstance(first, PrometheusMetricsSink)
    assert isinstance(second, PrometheusMetricsSink)
    # Two apps in one process must not collide on prometheus-client's global registry.
    assert first.registry is not second.registry
    monkeypatch.setenv("SONIQ_OBSERVERS", "prometheus")
    assert find_sink(Soniq("memory://")) is not None
    monkeypatch.setenv("SONIQ_OBSERVERS", "")
    assert find_sink(Soniq("memory://")) is None
