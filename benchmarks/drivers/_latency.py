"""Shared by every bench jobs module: the no-op handler's one optional duty."""

from __future__ import annotations

import os
import time

_PATH = os.environ.get("BENCH_LATENCY_FILE")


def record_pickup(enqueued_at: float | None) -> None:
    """In the latency run, append (now - enqueue call) in seconds to the record file."""
    if enqueued_at is None or _PATH is None:
        return
    delay = time.time() - enqueued_at
    with open(_PATH, "a") as handle:
        handle.write(f"{delay:.6f}\n")
