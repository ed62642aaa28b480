"""The tasks `soniq_worker` finds: every installed app's `tasks` module is imported at start."""

from __future__ import annotations

import asyncio

from django.tasks import task


@task
def total(prices: list[float]) -> float:
    return round(sum(prices), 2)


@task(queue_name="emails", priority=10)
async def send_receipt(order: str, email: str) -> str:
    await asyncio.sleep(0.1)  # stands in for the mail server
    return f"receipt for {order} sent to {email}"
