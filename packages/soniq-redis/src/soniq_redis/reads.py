"""The dashboard reads on Redis, from the sorted-set indexes the scripts keep.

Counts are one script (one atomic snapshot) of ZCARDs per queue. Pages walk
the index that fits the filters (``qs:<status>:<queue>``, ``st:<status>``,
``q:<queue>``, ``all``; ``dlq:<queue>`` or ``dl`` for dead letters), all
scored by `created_at` (or `moved_to_dead_letter_at`) in microseconds with
the id breaking ties, which is exactly the keyset order; several indexes are
merged. Name filters, the search and a dead-letter `filter`'s names, reasons
and resurrected flag are applied to the rows read, so a rare name costs a
longer walk; the filter's move-time range bounds the scores walked. `done`
activity has no index by finish time: it reads the `updated_at` of every done
row (cost grows with the done backlog). Queue names come from the ``queues``
set, which keeps a queue after its last row is purged.
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar, cast

from redis.asyncio import Redis

from soniq.backend import (
    ActivityBucket,
    DeadLetterPage,
    DeadLetterPageParams,
    DeadLetterRecord,
    JobActivityParams,
    JobCountsParams,
    JobCursor,
    JobPage,
    JobPageParams,
    JobRecord,
    JobStatus,
    QueueCounts,
    activity,
    cut,
    dead_letter_cursor,
    dead_letter_matches,
    job_cursor,
    job_matches,
)
from soniq_redis.keys import KeySpace
from soniq_redis.rows import dead_letter_record, from_micros, job_record, text_map, to_micros

CHUNK = 200
_Row = TypeVar("_Row", JobRecord, DeadLetterRecord)


def counts_from_reply(reply: Sequence[Sequence[Any]]) -> list[QueueCounts]:
    result = []
    for name, queued, processing, done, cancelled, dead, scheduled, oldest, oldest_due in reply:
        five = [int(queued), int(processing), int(done), int(cancelled), int(dead)]
        result.append(
            QueueCounts(
                queue=str(name),
                total=sum(five),
                queued=five[0],
                processing=five[1],
                done=five[2],
                cancelled=five[3],
                dead_letter=five[4],
                scheduled=int(scheduled),
                oldest_queued_at=from_micros(int(float(oldest))) if str(oldest) else None,
                oldest_due_at=from_micros(int(float(oldest_due))) if str(oldest_due) else None,
            )
        )
    return sorted(result, key=lambda c: c.queue)


def job_counts_args(params: JobCountsParams) -> list[str]:
    return list(params.queues) if params.queues is not None else [""]


async def _walk(
    client: Redis, key: str, before: tuple[int, str] | None, scores: tuple[int | None, int | None] = (None, None)
) -> AsyncIterator[tuple[int, str]]:
    """`(score, member)` of one sorted set, highest first, strictly below `before`, with a score
    from ``scores[0]`` to ``scores[1]`` (both inclusive; None: open)."""
    floor, ceiling = scores
    top: int | str = "+inf" if before is None else before[0]
    if ceiling is not None and (before is None or ceiling < before[0]):
        top = ceiling
    bottom: int | str = "-inf" if floor is None else floor
    skip = 0
    last = before
    while True:
        chunk = cast(
            list[tuple[Any, float]],
            await client.zrevrangebyscore(key, top, bottom, start=skip, num=CHUNK, withscores=True),
        )
        if not chunk:
            return
        for member, score in chunk:
            entry = (int(score), str(member))
            if last is not None and entry >= last:
                continue
            last = entry
            yield entry
        if len(chunk) < CHUNK:
            return
        # Read on from the lowest score seen, skipping the members already read at that score.
        assert last is not None
        lowest = int(chunk[-1][1])
        if int(chunk[0][1]) == lowest and top == lowest:
            skip += len(chunk)
        else:
            skip = sum(1 for _, score in chunk if int(score) == lowest)
        top = lowest


async def _merged(
    client: Redis, keys: Sequence[str], before: JobCursor | None, scores: tuple[int | None, int | None]
) -> AsyncIterator[str]:
    start = None if before is None else (to_micros(before.at), before.id)
    walkers = [_walk(client, key, start, scores) for key in keys]
    heads: list[tuple[tuple[int, tuple[int, ...]], int]] = []
    for index, walker in enumerate(walkers):
        first = await anext(walker, None)
        if first is not None:
            heads.append(((-first[0], _neg(first[1])), index))
    heapq.heapify(heads)
    seen: set[str] = set()
    while heads:
        key, index = heapq.heappop(heads)
        following = await anext(walkers[index], None)
        if following is not None:
            heapq.heappush(heads, ((-following[0], _neg(following[1])), index))
        member = _unneg(key[1])
        if member not in seen:
            seen.add(member)
            yield member


def _neg(text: str) -> tuple[int, ...]:
    # Order members descending inside a min-heap: negate each code point, longer strings first on a tie.
    return (*(-ord(ch) for ch in text), 1)


def _unneg(key: tuple[int, ...]) -> str:
    return "".join(chr(-code) for code in key[:-1])


async def _page(
    client: Redis,
    keys: Sequence[str],
    before: JobCursor | None,
    limit: int,
    row_key: Callable[[str], str],
    decode: Callable[[dict[str, str]], _Row],
    keep: Callable[[_Row], bool],
    scores: tuple[int | None, int | None] = (None, None),
) -> list[_Row]:
    found: list[_Row] = []
    batch: list[str] = []

    async def flush() -> None:
        async with client.pipeline(transaction=False) as pipe:
            for member in batch:
                pipe.hgetall(row_key(member))
            replies = await pipe.execute()
        for reply in replies:
            if reply:
                row = decode(text_map(reply))
                if keep(row):
                    found.append(row)
        batch.clear()

    async for member in _merged(client, keys, before, scores):
        batch.append(member)
        if len(batch) >= min(CHUNK, limit + 1 - len(found)):
            await flush()
            if len(found) > limit:
                break
    if batch and len(found) <= limit:
        await flush()
    return found[: limit + 1]


async def job_page(client: Redis, keys: KeySpace, params: JobPageParams) -> JobPage:
    p = keys.prefix
    statuses = None if params.statuses is None else [JobStatus(s).value for s in params.statuses]
    if statuses is not None and params.queues is not None:
        indexes = [f"{p}qs:{s}:{q}" for s in statuses for q in params.queues]
    elif statuses is not None:
        indexes = [f"{p}st:{s}" for s in statuses]
    elif params.queues is not None:
        indexes = [f"{p}q:{q}" for q in params.queues]
    else:
        indexes = [f"{p}all"]
    limit = max(0, params.limit)

    def decode(fields: dict[str, str]) -> JobRecord:
        row = job_record(fields)
        if not params.include_results and row.result is not None:
            row = _without_result(row)
        return row

    rows = await _page(client, indexes, params.before, limit, keys.job, decode, lambda r: job_matches(params, r))
    page, cursor = cut(rows, limit, job_cursor)
    return JobPage(rows=page, next_cursor=cursor)


def _without_result(row: JobRecord) -> JobRecord:
    return replace(row, result=None)


async def dead_letter_page(client: Redis, keys: KeySpace, params: DeadLetterPageParams) -> DeadLetterPage:
    p = keys.prefix
    wanted = params.filter
    queues = params.queues
    if wanted is not None and wanted.queues is not None:
        # Both lists given: only the queues in both; either alone: that one.
        queues = [q for q in (queues if queues is not None else wanted.queues) if q in wanted.queues]
    indexes = [f"{p}dlq:{q}" for q in dict.fromkeys(queues)] if queues is not None else [f"{p}dl"]
    # The move-time range narrows the walk of the indexes (scored by the move time, inclusive).
    scores: tuple[int | None, int | None] = (None, None)
    if wanted is not None:
        scores = (
            None if wanted.moved_from is None else to_micros(wanted.moved_from),
            None if wanted.moved_to is None else to_micros(wanted.moved_to),
        )
    limit = max(0, params.limit)
    rows = await _page(
        client,
        indexes,
        params.before,
        limit,
        keys.dead,
        dead_letter_record,
        lambda r: dead_letter_matches(params, r),
        scores,
    )
    page, cursor = cut(rows, limit, dead_letter_cursor)
    return DeadLetterPage(rows=page, next_cursor=cursor)


async def job_activity(client: Redis, keys: KeySpace, params: JobActivityParams, now: datetime) -> list[ActivityBucket]:
    p = keys.prefix
    done_index = f"{p}qs:done:{params.queue}" if params.queue is not None else f"{p}st:done"
    dead_index = f"{p}dlq:{params.queue}" if params.queue is not None else f"{p}dl"
    since = to_micros(params.since)
    done_at: list[datetime] = []
    cursor = 0
    while True:
        members = await client.zrange(done_index, cursor, cursor + 999)
        if not members:
            break
        async with client.pipeline(transaction=False) as pipe:
            for member in members:
                pipe.hget(keys.job(str(member)), "updated_at")
            stamps = await pipe.execute()
        done_at.extend(from_micros(int(s)) for s in stamps if s is not None and int(s) >= since)
        cursor += len(members)
    dead = cast(list[tuple[Any, float]], await client.zrangebyscore(dead_index, since, "+inf", withscores=True))
    return activity(params, now, done_at, [from_micros(int(score)) for _, score in dead])


async def queue_names(client: Redis, keys: KeySpace) -> list[str]:
    return sorted(str(name) for name in await client.smembers(f"{keys.prefix}queues"))
