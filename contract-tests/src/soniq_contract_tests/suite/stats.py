"""`queue_stats`: exactly six integer counts whose `total` adds up, overall and per queue."""

from __future__ import annotations

import uuid

from soniq.backend import (
    QUEUE_STATS_KEYS,
    Backend,
    CancelJobParams,
    DeadLetterJobParams,
    DeadLetterPageParams,
    QueueStats,
    QueueStatsParams,
    ReplayDeadLetterParams,
)
from soniq_contract_tests.harness import ContractHarness, complete_one, enqueue, enqueue_and_claim


async def _populate(
    backend: Backend, queue: str, *, queued: int, processing: int, done: int, cancelled: int, dead: int
) -> None:
    for _ in range(processing):
        await enqueue_and_claim(backend, worker_id="w1", queue=queue)
    for _ in range(done):
        row = await enqueue_and_claim(backend, worker_id="w1", queue=queue)
        assert await complete_one(backend, job_id=row.id, worker_id="w1", result=None)
    for _ in range(cancelled):
        row = await enqueue(backend, queue=queue)
        assert await backend.cancel_job(CancelJobParams(job_id=row.id))
    for _ in range(dead):
        row = await enqueue_and_claim(backend, worker_id="w1", queue=queue)
        assert await backend.dead_letter_job(
            DeadLetterJobParams(job_id=row.id, worker_id="w1", error="x", reason="max_attempts")
        )
    # Queued rows last: the claims above take the only due row of the queue.
    for _ in range(queued):
        await enqueue(backend, queue=queue)


def _counts(stats: QueueStats) -> dict[str, int]:
    assert isinstance(stats, QueueStats), f"queue_stats returned {type(stats).__name__}, not QueueStats"
    data = stats.to_dict()
    for key in QUEUE_STATS_KEYS:
        assert type(getattr(stats, key)) is int, f"{key} = {getattr(stats, key)!r} is not an int"
    assert data["total"] == sum(data[key] for key in QUEUE_STATS_KEYS if key != "total")
    return data


class QueueStatsContract:
    async def test_queue_stats_has_exactly_the_six_integer_keys(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            data = _counts(await backend.queue_stats(QueueStatsParams()))
            assert sorted(data) == sorted(["total", "queued", "processing", "done", "dead_letter", "cancelled"])
            assert data == dict.fromkeys(QUEUE_STATS_KEYS, 0)

    async def test_queue_stats_counts_each_status_and_the_total_adds_up(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            await _populate(backend, "default", queued=3, processing=2, done=1, cancelled=1, dead=2)
            assert _counts(await backend.queue_stats(QueueStatsParams())) == {
                "total": 9,
                "queued": 3,
                "processing": 2,
                "done": 1,
                "dead_letter": 2,
                "cancelled": 1,
            }

    async def test_queue_stats_per_queue(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            await _populate(backend, "emails", queued=2, processing=1, done=0, cancelled=1, dead=1)
            await _populate(backend, "reports", queued=1, processing=0, done=2, cancelled=0, dead=1)
            emails = _counts(await backend.queue_stats(QueueStatsParams(queue="emails")))
            reports = _counts(await backend.queue_stats(QueueStatsParams(queue="reports")))
            assert emails == {"total": 5, "queued": 2, "processing": 1, "done": 0, "dead_letter": 1, "cancelled": 1}
            assert reports == {"total": 4, "queued": 1, "processing": 0, "done": 2, "dead_letter": 1, "cancelled": 0}
            assert _counts(await backend.queue_stats(QueueStatsParams()))["total"] == 9
            assert _counts(await backend.queue_stats(QueueStatsParams(queue="nobody-uses-this"))) == dict.fromkeys(
                QUEUE_STATS_KEYS, 0
            )

    async def test_processing_counts_claimed_rows_whose_handler_has_not_started(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            await enqueue_and_claim(backend, worker_id="w1", mark_started=False)
            await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            assert _counts(await backend.queue_stats(QueueStatsParams()))["processing"] == 2

    async def test_replayed_job_counts_in_its_queue_and_the_dead_letter_stays_counted(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            await _populate(backend, "q", queued=0, processing=0, done=0, cancelled=0, dead=1)
            (dead,) = (await backend.dead_letter_page(DeadLetterPageParams())).rows
            await backend.replay_dead_letter(
                ReplayDeadLetterParams(
                    job_id=dead.id, new_job_id=str(uuid.uuid4()), scheduled_at=dead.moved_to_dead_letter_at
                )
            )
            assert _counts(await backend.queue_stats(QueueStatsParams(queue="q"))) == {
                "total": 2,
                "queued": 1,
                "processing": 0,
                "done": 0,
                "dead_letter": 1,
                "cancelled": 0,
            }
