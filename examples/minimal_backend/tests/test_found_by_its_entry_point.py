"""(a) Installed, the backend is found by its URL scheme through the ``soniq.backends`` entry point."""

from __future__ import annotations

import asyncio
import importlib.metadata

from soniq_minimal import MinimalBackend

from soniq import Soniq


def test_the_distribution_registers_the_minimal_scheme() -> None:
    found = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="soniq.backends")}
    assert found.get("minimal") == "soniq_minimal:MinimalBackend"


def test_an_app_built_from_the_url_runs_on_it() -> None:
    async def main() -> None:
        app = Soniq("minimal://", observers="")

        @app.job(name="example.add")
        async def add(a: int, b: int) -> int:
            return a + b

        job_id = await app.enqueue(add, a=2, b=3)
        assert isinstance(app.backend, MinimalBackend)
        assert app.backend.capabilities.describe_roles() == "QueueStore v1"
        row = await app.get_job(job_id)
        assert row is not None
        assert (row["status"], row["args"]) == ("queued", {"a": 2, "b": 3})
        await app.close()

    asyncio.run(main())
