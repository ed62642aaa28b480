"""Deduplication keys for `enqueue(unique=True)` and `enqueue(dedup_key=...)`.

The store enforces them (see `Backend.enqueue_jobs`); this module only decides
which key a job carries. ``unique=True`` derives one from the job's name and its
arguments in canonical JSON (keys sorted, no spaces), so the same call with the
arguments in another order is the same key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from soniq.validation import JobOptionsError

MAX_DEDUP_KEY_LENGTH = 255
UNIQUE_KEY_PREFIX = "unique:"


def unique_key(job_name: str, args: Mapping[str, Any]) -> str:
    """The key `unique=True` gives a job: its name plus a digest of its canonical arguments."""
    canonical = json.dumps(dict(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    digest = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{UNIQUE_KEY_PREFIX}{job_name}:{digest}"


def resolve_dedup_key(job_name: str, args: Mapping[str, Any], *, unique: bool, dedup_key: str | None) -> str | None:
    """The key a job is stored with: an explicit `dedup_key` wins over `unique` (as in 0.1.0)."""
    if dedup_key is not None:
        if not isinstance(dedup_key, str) or not dedup_key:
            raise JobOptionsError(f"dedup_key must be a non-empty string, got {dedup_key!r}")
        if len(dedup_key) > MAX_DEDUP_KEY_LENGTH:
            raise JobOptionsError(f"dedup_key must be at most {MAX_DEDUP_KEY_LENGTH} characters, got {len(dedup_key)}")
        return dedup_key
    if not isinstance(unique, bool):
        raise JobOptionsError(f"unique must be True or False, got {unique!r}")
    return unique_key(job_name, args) if unique else None
