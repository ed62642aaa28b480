"""JSON encoding of job arguments and results, with the size limit."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from soniq.errors import InternalError, JobArgumentsError
from soniq.speedups import loads

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


MAX_RESULT_BYTES = 1_048_576

# An escaped NUL (\u0000) not itself preceded by an escaping backslash: PostgreSQL refuses it in JSON and text.
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class ResultError(InternalError, TypeError):
    """A handler's return value that cannot be stored; the run fails with this as its error."""


def check_result(result: Any, *, max_bytes: int = MAX_RESULT_BYTES) -> Any:
    """The handler's return value as JSON-ready data every store accepts.

    Raises `ResultError` with the real reason for anything a store would
    refuse (or, worse, fail on inside a batched write): non-JSON values,
    NaN, nesting too deep to encode, a lone surrogate or a NUL in a string,
    or more than `max_bytes` of JSON.
    """
    try:
        encoded = json.dumps(result, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        raise ResultError("job result is nested too deeply to store as JSON") from None
    except (TypeError, ValueError) as exc:
        raise ResultError(f"job result is not JSON-serialisable: {exc}") from None
    try:
        size = len(encoded.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ResultError(
            f"job result contains a lone surrogate ({encoded[exc.start : exc.end]!a}), which no store accepts "
            "(a file name from os.listdir()? return os.fsencode(name).decode('utf-8', 'replace'))"
        ) from None
    if _ESCAPED_NUL.search(encoded):
        raise ResultError("job result contains a NUL character (\\x00) in a string, which PostgreSQL refuses")
    if size > max_bytes:
        raise ResultError(
            f"job result is {size} bytes as JSON, over the limit of {max_bytes} bytes (setting "
            "'max_result_bytes', environment variable SONIQ_MAX_RESULT_BYTES); store large results "
            "elsewhere and return a reference"
        )
    try:
        return loads(encoded)
    except RecursionError:
        raise ResultError("job result is nested too deeply to store as JSON") from None


def safe_text(text: str) -> str:
    """`text` that every store accepts in a text column: lone surrogates and NULs written as escapes."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


# C0 controls but the line break, DEL, C1 controls, and the bidirectional overrides that can reorder a line.
_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape_control(match: re.Match[str]) -> str:
    code = ord(match.group())
    return {9: "\\t", 13: "\\r"}.get(code) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable_lines(text: str) -> str:
    """`text` with its line breaks kept and every other control character escaped (``\\x1b``, ``\\r``),
    lone surrogates too: a traceback as a log shows it, where no line can rewrite or forge another."""
    return safe_text(_CONTROLS.sub(_escape_control, text))
