"""Reading a backend's URL query options and keyword options the same way everywhere."""

from __future__ import annotations

from typing import Any

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def parse_bool(option: str, value: Any) -> bool:
    """A flag given as a bool or as text (``1/true/yes/on``, ``0/false/no/off``, any case).

    Anything else is a `ValueError` naming the option and the value, never a silent False."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise ValueError(f"option {option} expects true or false, got {value!r}")
