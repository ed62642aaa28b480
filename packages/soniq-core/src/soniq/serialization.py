"""JSON encoding of job arguments and results, with the size limit."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from soniq.errors import JobArgumentsError

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_VARIANT = "89ab"


def new_job_ids(count: int) -> list[str]:
    """`count` random (version 4) UUIDs as strings, from one read of the system's random source."""
    raw = os.urandom(16 * count).hex()
    ids = []
    for start in range(0, 32 * count, 32):
        h = raw[start : start + 32]
        ids.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}")
    return ids


def check_args(job_name: str, args: Mapping[str, Any], *, max_bytes: int) -> tuple[dict[str, Any], str]:
    """`args` as a plain dict and as compact JSON text, once it is known to encode within `max_bytes`."""
    try:
        encoded = _ENCODER.encode(args)
    except (TypeError, ValueError) as exc:
        raise JobArgumentsError(
            f"arguments of job {job_name!r} are not JSON-serialisable: {exc}; pass str, int, float, bool, None, "
            "lists and dicts with str keys"
        ) from None
    # Characters take at most 4 bytes in UTF-8: only a long text needs the exact count.
    if len(encoded) * 4 > max_bytes:
        size = len(encoded.encode("utf-8"))
        if size > max_bytes:
            raise JobArgumentsError(
                f"arguments of job {job_name!r} are {size} bytes as JSON, over the limit of {max_bytes} bytes "
                "(setting 'max_args_bytes', environment variable SONIQ_MAX_ARGS_BYTES); store large payloads "
                "elsewhere and pass a reference"
            )
    return dict(args), encoded


def check_result(result: Any) -> Any:
    """The handler's return value as JSON-ready data; raises TypeError naming the type otherwise."""
    try:
        return json.loads(json.dumps(result, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"job result is not JSON-serialisable: {exc}") from None
