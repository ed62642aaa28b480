"""The quick start's jobs. `Soniq()` with no URL uses the embedded SQLite default, ./soniq.db."""

from __future__ import annotations

import asyncio
import hashlib

from soniq import Soniq

app = Soniq()


@app.job(queue="emails", max_retries=5)
async def send_welcome_email(user_id: int) -> str:
    await asyncio.sleep(0.01)  # stands in for an SMTP call
    return f"welcome mail sent to user {user_id}"


@app.job(queue="media", timeout=30)
def make_thumbnail(name: str) -> str:
    # A plain `def` runs in the bounded sync thread pool.
    return hashlib.sha256(name.encode()).hexdigest()[:12]
