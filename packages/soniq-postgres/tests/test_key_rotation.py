"""`KeyRotationStore` on PostgreSQL: the walk finds every row holding a sealed value exactly once, in
pages that each look at no more than `limit` rows, and `reseal_row` writes all given fields only
when each still holds the text the walk returned. Then `soniq keys rotate` end to end: values sealed
with an old key open with the new key alone afterwards, and a worker holding only the new key runs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pytest

from soniq import JobContext, Soniq
from soniq.backend import KeyRotationStore
from soniq.encryption import Cipher, UndecryptableError, cipher_for, generate_key, is_envelope, is_sealed_text
from soniq.key_rotation import rotate_keys
from soniq.params import ResealRowParams, SealedRowsParams
from soniq.records import SealedRow
from soniq_postgres import PostgresBackend

pytestmark = pytest.mark.asyncio

SEALED = '{"__soniq_encrypted__": "token-old"}'
RESEALED = '{"__soniq_encrypted__": "token-new"}'
PROGRESS = '{"done": 1, "total": 2, "message": "soniq-encrypted:token-old"}'
PROGRESS_NEW = '{"done": 1, "total": 2, "message": "soniq-encrypted:token-new"}'


async def add_job(
    raw: asyncpg.Connection,
    namespace: str,
    job_id: str,
    args: str = "{}",
    *,
    result: str | None = None,
    progress: str | None = None,
    status: str = "queued",
) -> None:
    await raw.execute(
        f"""INSERT INTO "{namespace}".soniq_jobs (id, job_name, queue, status, args, result, progress)
            VALUES ($1, 'app.job', 'default', $2, $3::json, $4::json, $5::json)""",
        job_id,
        status,
        args,
        result,
        progress,
    )


async def add_dead_letter(raw: asyncpg.Connection, namespace: str, job_id: str, args: str = "{}") -> None:
    await raw.execute(
        f"""INSERT INTO "{namespace}".soniq_dead_letter_jobs (id, job_name, queue, args, dead_letter_reason)
            VALUES ($1, 'app.job', 'default', $2::json, 'failed')""",
        job_id,
        args,
    )


async def stored(raw: asyncpg.Connection, namespace: str, job_id: str) -> tuple[str | None, ...] | None:
    row = await raw.fetchrow(
        f'SELECT args::text, result::text, progress::text FROM "{namespace}".soniq_jobs WHERE id = $1', job_id
    )
    return None if row is None else tuple(row)


async def walk(backend: PostgresBackend, limit: int) -> tuple[list[SealedRow], int]:
    """Every row a walk from the start returns, and how many pages it took."""
    rows: list[SealedRow] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await backend.sealed_rows(SealedRowsParams(cursor=cursor, limit=limit))
        pages += 1
        assert len(page.rows) <= limit
        rows.extend(page.rows)
        if page.next_cursor is None:
            return rows, pages
        assert page.next_cursor != cursor, "the walk does not move"
        cursor = page.next_cursor
        assert pages < 1000, "the walk does not end"


async def test_the_role_is_declared(backend: PostgresBackend) -> None:
    assert backend.capabilities.roles["KeyRotationStore"] == 1
    assert isinstance(backend, KeyRotationStore)


async def test_a_walk_of_an_empty_store_is_one_empty_last_page(backend: PostgresBackend) -> None:
    page = await backend.sealed_rows(SealedRowsParams(limit=10))
    assert (page.rows, page.next_cursor) == ([], None)


MIXED: dict[tuple[str, str], tuple[str | None, str | None, str | None]] = {
    ("jobs", "a:1"): (SEALED, None, None),  # a colon in the id: the cursor is split at the first one
    ("jobs", "b"): ('{"n": 2}', SEALED, None),
    ("jobs", "c"): ('{"n": 3}', None, PROGRESS),
    ("jobs", "e"): ('{"s": "nul \\u0000 here"}', SEALED, None),  # json, not jsonb, keeps \u0000
    ("jobs", "z"): (SEALED, SEALED, PROGRESS),
    ("dead_letter", "dl-1"): (SEALED, None, None),
    ("dead_letter", "dl-3"): ('{"note": "soniq-encrypted:x"}', None, None),
}
"""The sealed rows `fill_mixed` stores: (table, id) -> the texts a walk must return."""


async def fill_mixed(raw: asyncpg.Connection, namespace: str) -> None:
    for (table, job_id), (args, result, progress) in MIXED.items():
        if table == "jobs":
            await add_job(raw, namespace, job_id, args, result=result, progress=progress, status="done")
        else:
            await add_dead_letter(raw, namespace, job_id, args)
    # Plain rows all around them, and near misses: with LIKE, each `_` of "__soniq_encrypted__"
    # matches any character, so the first one would pass for a mark.
    await add_job(raw, namespace, "d", '{"xxsoniqxencryptedxx": "soniq-encrypted"}')
    await add_job(raw, namespace, "a:2", '{"n": 1}', result='{"ok": true}', progress='{"done": 1}')
    for n in range(12):
        await add_job(raw, namespace, f"p-{n:02}", json.dumps({"n": n}))
    await add_dead_letter(raw, namespace, "dl-2", '{"plain": "__soniq_encrypted"}')
    await add_dead_letter(raw, namespace, "dl-4", '{"SONIQ-ENCRYPTED:": 1}')


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 19, 20, 21, 500])
async def test_a_walk_returns_every_sealed_row_exactly_once_with_its_stored_texts(
    backend: PostgresBackend,
    raw: asyncpg.Connection,
    namespace: str,
    limit: int,
) -> None:
    await fill_mixed(raw, namespace)  # 19 job rows, 4 dead letters
    rows, pages = await walk(backend, limit)
    found = [(row.table, row.id) for row in rows]
    assert sorted(found) == sorted(MIXED), "each sealed row once, no plain row"
    # Job rows first, then the dead letters, each table in the server's id order.
    in_order = [
        (table, record["id"])
        for table, name in (("jobs", "soniq_jobs"), ("dead_letter", "soniq_dead_letter_jobs"))
        for record in await raw.fetch(f'SELECT id FROM "{namespace}".{name} ORDER BY id')
        if (table, record["id"]) in MIXED
    ]
    assert found == in_order
    for row in rows:
        assert (row.args_json, row.result_json, row.progress_json) == MIXED[(row.table, row.id)]
    # A page looks at `limit` rows at most, sealed or not: 23 rows need at least 23 / limit pages.
    assert pages >= -(-23 // limit)


async def test_pages_before_the_last_may_be_empty_and_the_walk_still_goes_on(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    for n in range(10):
        await add_job(raw, namespace, f"p-{n}")
    await add_job(raw, namespace, "z", SEALED)
    await add_dead_letter(raw, namespace, "zz", SEALED)
    first = await backend.sealed_rows(SealedRowsParams(limit=4))
    assert (first.rows, first.next_cursor) == ([], "jobs:p-3")
    second = await backend.sealed_rows(SealedRowsParams(cursor=first.next_cursor, limit=4))
    assert (second.rows, second.next_cursor) == ([], "jobs:p-7")
    # The last three job rows, then one dead letter with what is left of the page.
    third = await backend.sealed_rows(SealedRowsParams(cursor=second.next_cursor, limit=4))
    assert [(row.table, row.id) for row in third.rows] == [("jobs", "z"), ("dead_letter", "zz")]
    assert third.next_cursor == "dead_letter:zz"
    last = await backend.sealed_rows(SealedRowsParams(cursor=third.next_cursor, limit=4))
    assert (last.rows, last.next_cursor) == ([], None)
    # Job rows that fill a page exactly: the next page finds the jobs done and reads the dead letters.
    full = await backend.sealed_rows(SealedRowsParams(cursor="jobs:p-7", limit=3))
    assert (len(full.rows), full.next_cursor) == (1, "jobs:z")
    handed = await backend.sealed_rows(SealedRowsParams(cursor=full.next_cursor, limit=3))
    assert ([(row.table, row.id) for row in handed.rows], handed.next_cursor) == ([("dead_letter", "zz")], None)


async def test_a_bad_cursor_or_limit_is_refused(backend: PostgresBackend) -> None:
    for cursor in ("schedules:x", "jobs:", "", "other"):
        with pytest.raises(ValueError, match="cursor"):
            await backend.sealed_rows(SealedRowsParams(cursor=cursor, limit=5))
    with pytest.raises(ValueError, match="limit"):
        await backend.sealed_rows(SealedRowsParams(limit=0))


def scans_of(plan: Any, relation: str) -> list[dict[str, Any]]:
    """The plan nodes reading `relation`."""
    found: list[dict[str, Any]] = []
    stack = [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("Relation Name") == relation:
                found.append(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


@pytest.mark.parametrize("plan_mode", ["force_custom_plan", "force_generic_plan"])
async def test_a_page_reads_at_most_limit_rows_through_the_primary_key(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str, plan_mode: str
) -> None:
    """With sealed rows rare (none at all in the range a page looks at), a page still stops after
    `limit` rows: its cost does not grow with the table."""
    await raw.execute(
        f"""INSERT INTO "{namespace}".soniq_jobs (id, job_name, queue, args)
            SELECT 'p-' || lpad(g::text, 6, '0'), 'app.job', 'default', '{{"n": 1}}'
            FROM generate_series(1, 20000) AS g"""
    )
    await add_job(raw, namespace, "zz", SEALED)
    await raw.execute(f'ANALYZE "{namespace}".soniq_jobs')
    sql = backend._key_rotation_sql  # the statements sealed_rows runs
    await raw.execute(f"SET plan_cache_mode = {plan_mode}")
    for statement, args in ((sql.pages[("jobs", False)], (50,)), (sql.pages[("jobs", True)], (50, "p-010000"))):
        # A prepared statement, as asyncpg runs it, so that the generic plan is the one explained.
        prepared = await raw.prepare(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}")
        plan = json.loads(await prepared.fetchval(*args))
        scans = scans_of(plan, "soniq_jobs")
        assert scans, plan
        for scan in scans:
            assert scan["Node Type"] == "Index Scan", plan
            assert scan["Index Name"] == "soniq_jobs_pkey", plan
            assert scan["Actual Rows"] * scan["Actual Loops"] <= 50, plan
    page = await backend.sealed_rows(SealedRowsParams(cursor="jobs:p-010000", limit=50))
    assert (page.rows, page.next_cursor) == ([], "jobs:p-010050")


# -- reseal_row -----------------------------------------------------------------------------


async def test_reseal_writes_every_given_field_and_leaves_the_others(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    await add_job(raw, namespace, "j", SEALED, result=SEALED, progress=PROGRESS, status="done")
    await add_job(raw, namespace, "k", SEALED, result=SEALED, progress=PROGRESS, status="done")
    written = await backend.reseal_row(
        ResealRowParams("jobs", "j", args_json=(SEALED, RESEALED), progress_json=(PROGRESS, PROGRESS_NEW))
    )
    assert written is True
    assert await stored(raw, namespace, "j") == (RESEALED, SEALED, PROGRESS_NEW)
    assert await stored(raw, namespace, "k") == (SEALED, SEALED, PROGRESS)  # another row: untouched
    assert await backend.reseal_row(ResealRowParams("jobs", "j", result_json=(SEALED, RESEALED))) is True
    assert await stored(raw, namespace, "j") == (RESEALED, RESEALED, PROGRESS_NEW)
    # The walk now returns the new texts.
    rows, _ = await walk(backend, 10)
    assert [(row.id, row.args_json, row.result_json, row.progress_json) for row in rows] == [
        ("j", RESEALED, RESEALED, PROGRESS_NEW),
        ("k", SEALED, SEALED, PROGRESS),
    ]


async def test_reseal_with_any_stale_old_value_returns_false_and_writes_nothing(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    await add_job(raw, namespace, "j", SEALED, result=SEALED, progress=PROGRESS, status="done")
    # A worker wrote a new result after the walk read the row: its write wins, whole.
    newer = '{"__soniq_encrypted__": "token-written-by-a-worker"}'
    await raw.execute(f"""UPDATE "{namespace}".soniq_jobs SET result = $1::json WHERE id = 'j'""", newer)
    written = await backend.reseal_row(
        ResealRowParams("jobs", "j", args_json=(SEALED, RESEALED), result_json=(SEALED, RESEALED))
    )
    assert written is False
    assert await stored(raw, namespace, "j") == (SEALED, newer, PROGRESS)
    # An old value for a column the row holds nothing in never matches.
    await add_job(raw, namespace, "queued", SEALED)
    assert await backend.reseal_row(ResealRowParams("jobs", "queued", result_json=(SEALED, RESEALED))) is False
    assert await stored(raw, namespace, "queued") == (SEALED, None, None)


async def test_reseal_compares_text_even_where_jsonb_would_refuse_the_value(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    """A `json` column may hold \\u0000, which a ``::jsonb`` cast refuses with an error: the
    compare-and-set must answer, not fail."""
    with_nul = '{"done": 1, "message": "soniq-encrypted:token", "note": "\\u0000"}'
    await add_job(raw, namespace, "j", SEALED, progress=with_nul)
    new = '{"done": 1, "message": "soniq-encrypted:token-new", "note": "\\u0000"}'
    assert await backend.reseal_row(ResealRowParams("jobs", "j", progress_json=(PROGRESS, new))) is False
    assert await backend.reseal_row(ResealRowParams("jobs", "j", progress_json=(with_nul, new))) is True
    assert await stored(raw, namespace, "j") == (SEALED, None, new)


async def test_reseal_of_a_missing_row_is_false(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    assert await backend.reseal_row(ResealRowParams("jobs", "gone", args_json=(SEALED, RESEALED))) is False
    assert await backend.reseal_row(ResealRowParams("dead_letter", "gone", args_json=(SEALED, RESEALED))) is False
    # A job row moved to the dead letters meanwhile is gone from `jobs`; the same id there is not written.
    await add_dead_letter(raw, namespace, "moved", SEALED)
    assert await backend.reseal_row(ResealRowParams("jobs", "moved", args_json=(SEALED, RESEALED))) is False
    assert (
        await raw.fetchval(f"""SELECT args::text FROM "{namespace}".soniq_dead_letter_jobs WHERE id = 'moved'""")
        == SEALED
    )
    # No field given: nothing to compare, so the answer is whether the row is there.
    assert await backend.reseal_row(ResealRowParams("dead_letter", "moved")) is True
    assert await backend.reseal_row(ResealRowParams("jobs", "moved")) is False
    with pytest.raises(ValueError, match="tables"):
        await backend.reseal_row(ResealRowParams("schedules", "x", args_json=(SEALED, RESEALED)))


async def test_reseal_of_a_dead_letter_writes_its_args_only(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    await add_dead_letter(raw, namespace, "dl", SEALED)
    assert await backend.reseal_row(ResealRowParams("dead_letter", "dl", args_json=(RESEALED, SEALED))) is False
    # A dead letter keeps no result or progress: an old value given for either cannot match.
    assert (
        await backend.reseal_row(
            ResealRowParams("dead_letter", "dl", args_json=(SEALED, RESEALED), result_json=(SEALED, RESEALED))
        )
        is False
    )
    query = f"""SELECT args::text FROM "{namespace}".soniq_dead_letter_jobs WHERE id = 'dl'"""
    assert await raw.fetchval(query) == SEALED
    assert await backend.reseal_row(ResealRowParams("dead_letter", "dl", args_json=(SEALED, RESEALED))) is True
    assert await raw.fetchval(query) == RESEALED


async def test_racing_reseals_of_one_row_write_once(
    backend: PostgresBackend, raw: asyncpg.Connection, namespace: str
) -> None:
    """Two rotations that read the same text: the UPDATE re-checks the row it waited for, so one
    writes and the other is told the row changed."""
    await add_job(raw, namespace, "j", SEALED)
    outcomes = await asyncio.gather(
        *(
            backend.reseal_row(ResealRowParams("jobs", "j", args_json=(SEALED, f'{{"__soniq_encrypted__": "t{n}"}}')))
            for n in range(8)
        )
    )
    assert sorted(outcomes) == [False] * 7 + [True]
    winner = outcomes.index(True)
    assert await stored(raw, namespace, "j") == (f'{{"__soniq_encrypted__": "t{winner}"}}', None, None)


# -- soniq keys rotate, end to end ------------------------------------------------------------


async def sealed_values(raw: asyncpg.Connection, namespace: str) -> dict[str, Any]:
    """Every sealed value stored, by "table:id:column" (a progress object by its message)."""
    found: dict[str, Any] = {}
    for table, columns in (("soniq_jobs", ("args", "result", "progress")), ("soniq_dead_letter_jobs", ("args",))):
        for row in await raw.fetch(
            f'SELECT id, {", ".join(c + "::text AS " + c for c in columns)} FROM "{namespace}".{table}'
        ):
            for column in columns:
                value = None if row[column] is None else json.loads(row[column])
                if column == "progress" and isinstance(value, dict):
                    value = value.get("message")
                if is_envelope(value) or is_sealed_text(value):
                    found[f"{table}:{row['id']}:{column}"] = value
    return found


def opens(cipher: Cipher, value: Any) -> bool:
    try:
        cipher.open(value) if is_envelope(value) else cipher.open_text(value)
    except UndecryptableError:
        return False
    return True


async def test_rotation_leaves_every_value_opening_with_the_new_key_alone(
    backend: PostgresBackend, pg_url: str, raw: asyncpg.Connection, namespace: str
) -> None:
    old, new = generate_key(), generate_key()
    settings: dict[str, Any] = {
        "backend_options": {"namespace": namespace},
        "heartbeat_interval": 0.2,
        "heartbeat_timeout": 1.0,
        "poll_interval": 0.05,
        "observers": "",
    }
    ran: list[int] = []

    def declare(app: Soniq) -> None:
        @app.job(name="vault.store", encrypted=True, max_retries=0)
        async def store(n: int, ctx: JobContext) -> int:
            ran.append(n)
            await ctx.progress(1, 1, message=f"stored {n}")
            if n == 2:
                raise ValueError("two")
            return n * 10

        @app.job(name="plain.echo")
        async def echo(text: str) -> str:
            return text

    producer = Soniq(pg_url, encryption_keys=[old], **settings)
    declare(producer)
    rotated = Soniq(pg_url, encryption_keys=[new], **settings)
    declare(rotated)
    try:
        done = [await producer.enqueue("vault.store", n=n) for n in range(4)]
        plain = await producer.enqueue("plain.echo", text="visible")
        await asyncio.wait_for(producer.run_worker(run_once=True, install_signal_handlers=False), 20)
        assert sorted(ran) == [0, 1, 2, 3]
        waiting = await producer.enqueue("vault.store", n=9)  # queued, sealed with the old key only

        before = await sealed_values(raw, namespace)
        # Three done rows (args, result, progress), the dead letter's args, the queued row's args.
        assert len(before) == 3 * 3 + 1 + 1, sorted(before)
        assert all(opens(Cipher([old]), value) and not opens(Cipher([new]), value) for value in before.values())

        report = await rotate_keys(backend, cipher_for((new, old)), batch_size=2)
        assert (report.values_resealed, report.undecryptable, report.rows_changed_meanwhile) == (len(before), 0, 0)

        after = await sealed_values(raw, namespace)
        assert after.keys() == before.keys()
        for where, value in after.items():
            assert opens(Cipher([new]), value), where
            assert not opens(Cipher([old]), value), where
            expected = (
                Cipher([old]).open(before[where]) if is_envelope(value) else Cipher([old]).open_text(before[where])
            )
            assert (Cipher([new]).open(value) if is_envelope(value) else Cipher([new]).open_text(value)) == expected
        assert await raw.fetchval(f"""SELECT args::text FROM "{namespace}".soniq_jobs WHERE id = $1""", plain) == (
            '{"text":"visible"}'
        )
        # Nothing is left to re-seal; the new key alone opens it all.
        again = await rotate_keys(backend, Cipher([new]))
        assert (again.values_resealed, again.undecryptable) == (0, 0)

        # A worker that holds only the new key runs the queued job and reads the old results.
        await asyncio.wait_for(rotated.run_worker(run_once=True, install_signal_handlers=False), 20)
        assert ran[-1] == 9
        assert await rotated.get_result(waiting) == 90
        assert [await rotated.get_result(job_id) for job_id in (done[0], done[1], done[3])] == [0, 10, 30]
    finally:
        await producer.close()
        await rotated.close()
