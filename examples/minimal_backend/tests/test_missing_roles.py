"""(d) A feature that needs a role this backend does not fill refuses with `MissingBackendRoleError`,
naming the feature, the role and the backend."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from soniq import Soniq
from soniq.errors import MissingBackendRoleError


def _refused(call: Callable[[Soniq], Awaitable[Any]], role: str) -> MissingBackendRoleError:
    async def main() -> MissingBackendRoleError:
        app = Soniq("minimal://", observers="")

        @app.job(name="example.noop")
        async def noop() -> None: ...

        try:
            with pytest.raises(MissingBackendRoleError) as caught:
                await call(app)
            return caught.value
        finally:
            await app.close()

    error = asyncio.run(main())
    assert error.role == role
    assert error.backend.endswith("MinimalBackend")
    assert f"needs the backend role {role}" in str(error)
    return error


def test_the_dead_letter_api_needs_dead_letter_store() -> None:
    _refused(lambda app: app.dead_letter.list(), "DeadLetterStore")


def test_depends_on_needs_dependency_store() -> None:
    async def enqueue_a_dependent(app: Soniq) -> None:
        first = await app.enqueue("example.noop")
        await app.enqueue("example.noop", depends_on=[first])

    _refused(enqueue_a_dependent, "DependencyStore")


def test_listing_jobs_needs_operator_reads() -> None:
    _refused(lambda app: app.list_jobs(), "OperatorReads")
