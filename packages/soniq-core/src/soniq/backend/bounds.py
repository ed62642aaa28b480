"""The bounds core puts on what callers hand in, for a backend (and its tests) to hold to: the
longest page, filter and offset a read is asked for, and which queue names and texts are storable."""

from __future__ import annotations

from soniq.validation import MAX_FILTER_LIMIT, MAX_OFFSET, MAX_PAGE_LIMIT, check_queue_name, storable_text

__all__ = ["MAX_FILTER_LIMIT", "MAX_OFFSET", "MAX_PAGE_LIMIT", "check_queue_name", "storable_text"]
