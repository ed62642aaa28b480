"""JSON encoding of job arguments and results, with the size limit."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from soniq.errors import JobArgumentsError


def check_args(job_name: str, args: Mapping[str, Any], *, max_bytes: int) -> tuple[dict[str, Any], str]:
    """`args` as a plain dict and as compact JSON text, once it is known to encode within `max_bytes`."""
    try:
        encoded = json.dumps(args, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
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
