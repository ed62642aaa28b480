"""Installed means on; SONIQ_OBSERVERS chooses the set."""

from __future__ import annotations

import pytest

from soniq import Soniq
from soniq_otel import SoniqTracingObserver


def test_installed_means_on_and_soniq_observers_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SONIQ_OBSERVERS", raising=False)
    assert any(isinstance(o, SoniqTracingObserver) for o in Soniq("memory://").observers)
    monkeypatch.setenv("SONIQ_OBSERVERS", "otel")
    assert any(isinstance(o, SoniqTracingObserver) for o in Soniq("memory://").observers)
    monkeypatch.setenv("SONIQ_OBSERVERS", "")
    assert not any(isinstance(o, SoniqTracingObserver) for o in Soniq("memory://").observers)
