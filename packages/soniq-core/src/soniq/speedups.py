"""Optional speed-ups, used when installed (``pip install soniq-core[speed]``): uvloop and orjson.

Neither is ever required. `worker_loop_factory` picks the event loop ``soniq worker`` runs on
(setting ``event_loop``); `loads` decodes stored JSON with orjson when it is importable and gives
exactly what `json.loads` gives. Where the two could differ, `json` decodes the text instead:
text orjson refuses (NaN and Infinity literals, lone surrogates), text with a run of 19 or more
digits (orjson reads an integer beyond 64 bits as a float, `json` as an int), and text with enough
brackets to nest near either library's depth limit. So values, and the error texts of rows that
cannot be decoded, are the same with and without orjson.

Encoding stays on `json`: orjson writes NaN as ``null``, encodes datetimes, UUIDs, enums and
dataclasses that `json` refuses, and spells some floats differently, so it would change what
`enqueue` accepts; job arguments are encoded once per enqueue, where it would save little.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re
from collections.abc import Callable
from typing import Any

from soniq.errors import SoniqError

_orjson: Any
try:  # optional: the `speed` extra (imported by name: type checkers need not have it)
    _orjson = importlib.import_module("orjson")
except ImportError:
    _orjson = None

__all__ = ["ORJSON", "loads", "running_loop_name", "uvloop_available", "worker_loop_factory"]

ORJSON = _orjson is not None
"""Whether stored JSON is decoded with orjson."""


_LONG_NUMBER = re.compile(r"\d{19}")
_LONG_NUMBER_BYTES = re.compile(rb"\d{19}")
DEEP_NESTING = 500
"""Text with at least this many opening brackets is decoded by `json` (orjson stops at depth 1024,
`json` where Python's recursion limit says): both then fail, or succeed, exactly as `json` does."""


def _loads_orjson(text: str | bytes | bytearray) -> Any:
    assert _orjson is not None
    if isinstance(text, str):
        risky = _LONG_NUMBER.search(text) is not None or text.count("[") + text.count("{") >= DEEP_NESTING
    else:
        risky = _LONG_NUMBER_BYTES.search(text) is not None or text.count(b"[") + text.count(b"{") >= DEEP_NESTING
    if risky:
        return json.loads(text)
    try:
        return _orjson.loads(text)
    except _orjson.JSONDecodeError:
        # Refused by orjson (NaN, Infinity, a lone surrogate, or not JSON at all): json decides, and its
        # error text is the one undecodable rows have always been reported with.
        return json.loads(text)


loads: Callable[[str | bytes | bytearray], Any] = _loads_orjson if _orjson is not None else json.loads
"""`json.loads`, through orjson when it is installed (same values, same errors)."""


def running_loop_name() -> str:
    """``uvloop`` when the running event loop is uvloop's, else ``asyncio``."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"


def uvloop_available() -> bool:
    try:
        importlib.import_module("uvloop")
    except ImportError:
        return False
    return True


def worker_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for `asyncio.Runner` that setting ``event_loop`` asks for (None: asyncio's own)."""
    if choice == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if choice == "uvloop":
            raise SoniqError(
                "setting event_loop is 'uvloop' (SONIQ_EVENT_LOOP) but uvloop is not installed: "
                "pip install 'soniq-core[speed]', or set it to 'auto' or 'asyncio'"
            ) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
