"""Row-by-row decoding of args stored as raw text (what another producer, or a hand fix, wrote).

The memory store keeps args as Python objects, so only a test that calls
`MemoryBackend.put_raw_args` puts text here; decoding it mirrors what a
JSON column backend does, so the contract's corrupt-row tests mean the same.
"""

from __future__ import annotations

import json
from typing import Any


def decode_args(text: str) -> tuple[dict[str, Any], str | None]:
    """The stored args and None, or ``{}`` and what is wrong with them; never raises."""
    try:
        value = json.loads(text)
    except RecursionError:
        return {}, "args are nested too deeply to decode"
    except ValueError as exc:
        return {}, f"args are not valid JSON: {exc}"
    if not isinstance(value, dict):
        return {}, f"args must be a JSON object, got {type(value).__name__}"
    return value, None
