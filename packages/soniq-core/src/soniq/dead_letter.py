"""The dead-letter service: `app.dead_letter.list / get / replay / purge`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from soniq.errors import SoniqError
from soniq.params import GetDeadLetterParams, ListDeadLetterParams, PurgeDeadLetterParams, ReplayDeadLetterParams
from soniq.validation import check_page

if TYPE_CHECKING:
    from soniq.app import Soniq


class DeadLetterNotFoundError(SoniqError, LookupError):
    """No dead-letter row has that id."""


class DeadLetterService:
    def __init__(self, app: Soniq) -> None:
        self._app = app

    async def list(self, queue: str | None = None, *, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        check_page(limit, offset)
        backend = await self._app.connected_backend()
        rows = await backend.list_dead_letter(ListDeadLetterParams(queue=queue, limit=limit, offset=offset))
        return [row.to_dict() for row in rows]

    async def get(self, job_id: str) -> dict[str, Any] | None:
        backend = await self._app.connected_backend()
        row = await backend.get_dead_letter(GetDeadLetterParams(job_id=str(job_id)))
        return row.to_dict() if row else None

    async def replay(self, job_id: str) -> str:
        """Queue a fresh copy of a dead-lettered job; returns the new job's id.

        The dead-letter row stays, with `resurrection_count` incremented.
        """
        backend = await self._app.connected_backend()
        new_id = await backend.replay_dead_letter(
            ReplayDeadLetterParams(job_id=str(job_id), new_job_id=str(uuid.uuid4()), scheduled_at=datetime.now(UTC))
        )
        if new_id is None:
            raise DeadLetterNotFoundError(f"no dead-letter job with id {job_id!r}")
        return new_id

    async def purge(self, job_id: str) -> bool:
        """Delete a dead-letter row for good; False when there was none."""
        backend = await self._app.connected_backend()
        return await backend.purge_dead_letter(PurgeDeadLetterParams(job_id=str(job_id)))
