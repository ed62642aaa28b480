"""The limits section of ``soniq inspect``: what is declared, and what runs now."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from soniq.cli.output import safe
from soniq.limits import limit_usage

if TYPE_CHECKING:
    from soniq.app import Soniq

SHOWN_KEYS = 10
"""Partitions listed per partitioned limit in the text output (all of them with --json)."""


async def limits_section(app: Soniq) -> dict[str, Any]:
    """The app's limits (the `queue_limits` setting and the jobs modules' `@app.job` limits) with
    the rows `processing` in each group now. Counting them is `OperatorReads`: with limits declared,
    a backend without that role raises `MissingBackendRoleError`."""
    limits = app.group_limits()
    if not limits:
        return {"limits": []}
    backend = await app.connected_backend()
    return {"limits": await limit_usage(backend, limits)}


def print_limits(section: dict[str, Any]) -> None:
    limits = section["limits"]
    if not limits:
        print(
            "limits: none declared (queue_limits setting, or @app.job(max_concurrent=, rate_limit=) in --jobs-modules)"
        )
        return
    print(f"limits: {len(limits)}")
    for entry in limits:
        running = f"{entry['processing']}{'' if entry['complete'] else '+'} running now"
        print(f"  {entry['scope']} {safe(entry['name'])}: {entry['description']}; {running}")
        by_key = entry.get("processing_by_key") or []
        for item in by_key[:SHOWN_KEYS]:
            key = "(no key)" if item["limit_key"] is None else safe(item["limit_key"])
            print(f"    limit_key {key}: {item['processing']} running")
        if len(by_key) > SHOWN_KEYS:
            print(f"    ... and {len(by_key) - SHOWN_KEYS} more keys (--json lists them all)")
