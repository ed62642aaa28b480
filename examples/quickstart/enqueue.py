"""Queue a few jobs, the way a web request handler would."""

from __future__ import annotations

import asyncio

from jobs import app, make_thumbnail, send_welcome_email


async def main() -> None:
    async with app:
        await app.setup()
        ids = await app.enqueue_many(send_welcome_email, [{"user_id": n} for n in range(1, 11)])
        ids.append(await app.enqueue(make_thumbnail, name="cat.png"))
        print(f"queued {len(ids)} jobs; stats: {await app.get_queue_stats()}")


asyncio.run(main())
