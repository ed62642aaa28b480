"""OpenTelemetry spans for Soniq: every shutdown transition, every nack, every job.

Installed means on: the ``otel`` entry in ``soniq.observers`` makes every
`Soniq` app build a `SoniqTracingObserver` over the global tracer provider
(set ``SONIQ_OBSERVERS`` to choose the set, empty for none). Configure an
SDK provider and exporter as usual; without one the spans cost nothing.
"""

from __future__ import annotations

from soniq_otel import attributes
from soniq_otel.observer import FLUSH_TIMEOUT_MILLIS, SoniqTracingObserver, create_observer

__version__ = "0.2.0"

__all__ = ["FLUSH_TIMEOUT_MILLIS", "SoniqTracingObserver", "attributes", "create_observer"]
