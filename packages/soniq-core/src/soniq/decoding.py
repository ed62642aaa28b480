"""Decoding what a store holds, row by row, for backends: one wording of what is wrong on every backend.

Rows may be written by other producers or fixed by hand, so nothing in them is
trusted: a value that cannot be decoded comes back with the reason instead of
raising, and the backend returns that row with `decode_error` set (core then
dead-letters it as `corrupt_row`). One bad row never fails the claim or listing
it is in.
"""

from __future__ import annotations

from typing import Any

from soniq.speedups import loads


def json_kind(value: Any) -> str:
    """The JSON type name of a decoded value: ``object``, ``array``, ``string``, ..."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def decode_json(text: Any, what: str) -> tuple[Any, str | None]:
    """A stored JSON value and None, or None and why it could not be decoded; None stays None."""
    if text is None:
        return None, None
    if not isinstance(text, str | bytes | bytearray):
        return None, f"{what}: stored as {type(text).__name__}, not JSON text"
    try:
        return loads(text), None
    except RecursionError:
        return None, f"{what}: JSON nested deeper than Python can decode"
    except ValueError as exc:
        return None, f"{what}: invalid JSON ({exc})"


def decode_args(text: Any) -> tuple[dict[str, Any], str | None]:
    """A row's stored args and None, or ``{}`` and why they cannot be used."""
    if text is None:
        return {}, "args: missing from the stored row"
    value, problem = decode_json(text, "args")
    if problem is not None:
        return {}, problem
    if not isinstance(value, dict):
        return {}, f"args: a JSON {json_kind(value)}, not an object"
    return value, None


def join_problems(*problems: str | None) -> str | None:
    """Several decode problems of one row as one `decode_error` (None when there are none)."""
    found = [problem for problem in problems if problem]
    return "; ".join(found) if found else None
