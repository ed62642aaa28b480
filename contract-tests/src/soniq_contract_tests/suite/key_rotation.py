"""`KeyRotationStore`: the walk over stored sealed values, and their compare-and-set re-seal.

Core seals an encrypted job's args and result as ``{"__soniq_encrypted__": TOKEN}`` and its
progress message as ``"soniq-encrypted:" + TOKEN``; the store keeps them as any other JSON. A
walk of `sealed_rows` from cursor None to a None `next_cursor` returns every `soniq_jobs` row
(``table="jobs"``) and dead-letter row (``table="dead_letter"``) whose args, result or progress
JSON text holds one of the marks exactly once, with each field's stored JSON text (None where the
row has none), at most `limit` rows a page; it may also return rows holding neither. Rows added
or changed during a walk are aside; every other row is still found exactly once. `reseal_row`
writes each given field's new text only if that field still holds the old one, all given fields
or none, and says whether it wrote: False for a row that is gone or a field that changed.

The tests seal with a real Fernet key where `cryptography` is installed (any token text
otherwise: the store only sees JSON), dead-letter rows through `dead_letter_job` (a core method),
save progress where the backend declares `JobProgressStore`, replay and read dead letters where
it declares `DeadLetterStore`, and check every text against the value the test stored.
"""

from __future__ import annotations

import functools
import json
import secrets
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import strategies as st

from soniq.backend import (
    Backend,
    ClaimJobsParams,
    DeadLetterJobParams,
    DeadLetterStore,
    DeleteJobParams,
    GetDeadLetterParams,
    GetJobParams,
    JobProgressStore,
    JobRecord,
    JobStatus,
    PurgeDeadLetterParams,
    ReplayDeadLetterParams,
    ResealRowParams,
    SaveProgressParams,
    SealedRow,
    SealedRowPage,
    SealedRowsParams,
    has_role,
)
from soniq.backend.key_rotation_store import SEALED_MARKS
from soniq.backend.sealing import ENVELOPE_KEY, TEXT_PREFIX, Cipher, available, generate_key, rotate_keys
from soniq_contract_tests.harness import (
    MISSING_JOB_ID,
    ContractHarness,
    complete_one,
    enqueue,
    enqueue_and_claim,
    fields_except,
    must_get,
    utc_now,
)
from soniq_contract_tests.suite._examples import draw, json_values, plain_names

JOBS = "jobs"
DEAD_LETTER = "dead_letter"
WORKER = "w-seal"
LIMITS = (1, 2, 3)
"""The small page sizes every walk test runs with (the last page, an empty page and a full one)."""
LARGE_LIMIT = 1000
ARRIVING_PAGES = 5
"""How many pages of a walk see new rows arrive, in the test of rows coming and going."""


# -- sealed values ----------------------------------------------------------------------------


@functools.cache
def _cipher() -> Cipher | None:
    """A cipher with a key of its own when `cryptography` is installed, else None."""
    return Cipher((generate_key(),)) if available() else None


def _token() -> str:
    """Token-like text for a store that only sees JSON (used when `cryptography` is missing)."""
    return "gAAAAA" + secrets.token_urlsafe(60)


def envelope(value: Any = None) -> dict[str, str]:
    """`value` sealed as core seals args and results: ``{"__soniq_encrypted__": TOKEN}``."""
    cipher = _cipher()
    return cipher.seal(value) if cipher is not None else {ENVELOPE_KEY: _token()}


def sealed_message(text: str = "secret") -> str:
    """`text` sealed as core seals a progress message: ``"soniq-encrypted:" + TOKEN``."""
    cipher = _cipher()
    return cipher.seal_text(text) if cipher is not None else TEXT_PREFIX + _token()


def json_text(value: Any) -> str:
    """The JSON text core hands the store: compact, non-ASCII characters as they are."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def holds_mark(*values: Any) -> bool:
    """Whether any value's JSON text holds a mark (the marks need no escaping, so every store's
    text of the value holds it exactly when this one does)."""
    return any(value is not None and mark in json_text(value) for value in values for mark in SEALED_MARKS)


def progress_value(message: str | None, done: int = 3) -> dict[str, Any]:
    """A progress object of core's shape."""
    return {"done": done, "total": 10, "message": message, "updated_at": utc_now().isoformat()}


# -- what the test stored ---------------------------------------------------------------------


@dataclass
class Stored:
    """One row the test wrote, with the values it holds as the test knows them."""

    table: str
    id: str
    args: Mapping[str, Any]
    result: Any = None
    progress: Mapping[str, Any] | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.table, self.id)

    @property
    def sealed(self) -> bool:
        if self.table == DEAD_LETTER:
            return holds_mark(self.args)  # the rows the tests dead-letter hold no result or progress
        return holds_mark(self.args, self.result, self.progress)


@dataclass
class Rows:
    """The rows a test wrote, by (table, id)."""

    items: dict[tuple[str, str], Stored] = field(default_factory=dict)
    deleted: set[tuple[str, str]] = field(default_factory=set)
    """Rows removed since they were written (they may still have been returned before)."""

    def add(self, item: Stored) -> Stored:
        self.items[item.key] = item
        return item

    def remove(self, key: tuple[str, str]) -> None:
        self.items.pop(key, None)
        self.deleted.add(key)

    @property
    def sealed(self) -> set[tuple[str, str]]:
        return {key for key, item in self.items.items() if item.sealed}


async def queued(backend: Backend, rows: Rows, args: Mapping[str, Any]) -> Stored:
    row = await enqueue(backend, args=dict(args))
    return rows.add(Stored(JOBS, row.id, dict(args)))


async def done(backend: Backend, rows: Rows, args: Mapping[str, Any], result: Any) -> Stored:
    row = await enqueue_and_claim(backend, worker_id=WORKER, mark_started=True, args=dict(args))
    if not await complete_one(backend, job_id=row.id, worker_id=WORKER, result=result):
        raise AssertionError(f"completing the claimed row {row.id} by its owner was not written")
    return rows.add(Stored(JOBS, row.id, dict(args), result=result))


async def save_progress(backend: Backend, job_id: str, value: Mapping[str, Any], worker_id: str = WORKER) -> bool:
    written = await backend.save_progress(
        SaveProgressParams(job_id=job_id, worker_id=worker_id, progress_json=json_text(value))
    )
    if not isinstance(written, bool):
        raise AssertionError(f"save_progress returned {written!r}, not a bool")
    return written


async def running(backend: Backend, rows: Rows, args: Mapping[str, Any], progress: Mapping[str, Any]) -> Stored:
    """A claimed, started row owned by `WORKER` with `progress` saved (`JobProgressStore`)."""
    row = await enqueue_and_claim(backend, worker_id=WORKER, mark_started=True, args=dict(args))
    if not await save_progress(backend, row.id, progress):
        raise AssertionError(f"save_progress by the owner of the running row {row.id} returned False")
    return rows.add(Stored(JOBS, row.id, dict(args), progress=dict(progress)))


async def dead(backend: Backend, rows: Rows, args: Mapping[str, Any]) -> Stored:
    """A row moved to the dead-letter table (`dead_letter_job`, a core method)."""
    row = await enqueue_and_claim(backend, worker_id=WORKER, mark_started=True, args=dict(args))
    if not await backend.dead_letter_job(
        DeadLetterJobParams(job_id=row.id, worker_id=WORKER, error="gave up", reason="max_attempts")
    ):
        raise AssertionError(f"dead-lettering the claimed row {row.id} by its owner returned False")
    return rows.add(Stored(DEAD_LETTER, row.id, dict(args)))


async def replayed(backend: Backend, rows: Rows, args: Mapping[str, Any]) -> Stored:
    """A dead-letter row and the queued row its replay made, both holding `args` (`DeadLetterStore`)."""
    dead_row = await dead(backend, rows, args)
    new_id = str(uuid.uuid4())
    returned = await backend.replay_dead_letter(
        ReplayDeadLetterParams(job_id=dead_row.id, new_job_id=new_id, scheduled_at=utc_now() - timedelta(seconds=1))
    )
    if returned != new_id:
        raise AssertionError(f"replay_dead_letter of {dead_row.id} returned {returned!r}, expected {new_id!r}")
    return rows.add(Stored(JOBS, new_id, dict(args)))


Builder = Callable[[Backend, Rows, Mapping[str, Any]], Awaitable[object]]

KINDS: dict[str, Builder] = {
    "queued plain": lambda b, r, a: queued(b, r, a),
    "queued sealed": lambda b, r, a: queued(b, r, envelope(a)),
    "queued with a nested envelope": lambda b, r, a: queued(b, r, {"inner": envelope(a), "plain": a}),
    "queued with a sealed text in its args": lambda b, r, a: queued(b, r, {"note": sealed_message(), "n": 1}),
    "done plain": lambda b, r, a: done(b, r, a, a),
    "done with a null result": lambda b, r, a: done(b, r, a, None),
    "done with a sealed result": lambda b, r, a: done(b, r, a, envelope(a)),
    "done with sealed args and result": lambda b, r, a: done(b, r, envelope(a), envelope([a, 1])),
    "running with a plain progress": lambda b, r, a: running(b, r, a, progress_value("plain")),
    "running with a sealed progress message": lambda b, r, a: running(b, r, a, progress_value(sealed_message())),
    "dead letter plain": lambda b, r, a: dead(b, r, a),
    "dead letter sealed": lambda b, r, a: dead(b, r, envelope(a)),
    "replayed dead letter": lambda b, r, a: replayed(b, r, envelope(a)),
}
"""Every kind of row a walk meets, by name; the name says what it holds."""

NEEDS: dict[str, type[Any]] = {
    "running with a plain progress": JobProgressStore,
    "running with a sealed progress message": JobProgressStore,
    "replayed dead letter": DeadLetterStore,
}
"""Kinds a backend can only hold with another role; left out where it is not declared."""


def kinds_for(backend: Backend) -> list[str]:
    return [kind for kind in KINDS if kind not in NEEDS or has_role(backend, NEEDS[kind])]


async def build(backend: Backend, rows: Rows, mix: list[tuple[str, Mapping[str, Any]]]) -> None:
    kinds = set(kinds_for(backend))
    for kind, args in mix:
        if kind in kinds:
            await KINDS[kind](backend, rows, args)


async def every_kind(backend: Backend, rows: Rows) -> None:
    """Two rows of every kind the backend can hold, in an interleaved order."""
    kinds = kinds_for(backend)
    await build(backend, rows, [(kind, {"n": n, "kind": kind}) for n in range(2) for kind in kinds])


# -- walking ----------------------------------------------------------------------------------


async def walk(backend: Backend, limit: int, *, max_pages: int) -> list[SealedRow]:
    """Every row of a walk from cursor None to a None `next_cursor`, pages checked on the way."""
    cursor: str | None = None
    found: list[SealedRow] = []
    for _ in range(max_pages):
        page = await backend.sealed_rows(SealedRowsParams(cursor=cursor, limit=limit))
        if not isinstance(page, SealedRowPage):
            raise AssertionError(f"sealed_rows(cursor={cursor!r}, limit={limit}) returned {page!r}, not a page")
        if len(page.rows) > limit:
            raise AssertionError(
                f"sealed_rows(cursor={cursor!r}, limit={limit}) returned {len(page.rows)} rows: "
                f"{[(row.table, row.id) for row in page.rows]}"
            )
        for row in page.rows:
            if not isinstance(row, SealedRow) or row.table not in (JOBS, DEAD_LETTER):
                raise AssertionError(f"sealed_rows returned {row!r}: not a SealedRow of 'jobs' or 'dead_letter'")
        found.extend(page.rows)
        if page.next_cursor is None:
            return found
        if not isinstance(page.next_cursor, str):
            raise AssertionError(f"sealed_rows returned the cursor {page.next_cursor!r}, not text or None")
        cursor = page.next_cursor
    raise AssertionError(f"a walk with limit {limit} did not end within {max_pages} pages (last cursor {cursor!r})")


def page_budget(rows: Rows, limit: int) -> int:
    """Generous: several times the pages a walk looking at `limit` rows a page needs."""
    return 50 + 4 * (len(rows.items) + len(rows.deleted)) // limit + 4 * (len(rows.items) + len(rows.deleted))


def parsed(text: str | None, what: str) -> Any:
    if not isinstance(text, str):
        raise AssertionError(f"{what} is {text!r}, not JSON text")
    try:
        return json.loads(text)
    except ValueError:
        raise AssertionError(f"{what} is not JSON: {text!r}") from None


def check_texts(row: SealedRow, item: Stored) -> None:
    """The row's texts parse to what the test stored (None, or JSON null, where there is nothing)."""
    what = f"the {row.table} row {row.id}"
    if parsed(row.args_json, f"args_json of {what}") != item.args:
        raise AssertionError(f"args_json of {what} is {row.args_json!r}; the row holds {item.args!r}")
    for name, value in (("result_json", item.result), ("progress_json", item.progress)):
        text = getattr(row, name)
        if item.table == DEAD_LETTER:
            # A dead-letter row keeps whatever result or progress it keeps; these held none.
            if text is not None and parsed(text, f"{name} of {what}") is not None:
                raise AssertionError(f"{name} of {what} is {text!r}; the row had nothing there")
            continue
        if value is None:
            if text is not None and parsed(text, f"{name} of {what}") is not None:
                raise AssertionError(f"{name} of {what} is {text!r}; the row has nothing there")
        elif parsed(text, f"{name} of {what}") != value:
            raise AssertionError(f"{name} of {what} is {text!r}; the row holds {value!r}")


async def assert_walk(backend: Backend, rows: Rows, limit: int) -> dict[tuple[str, str], SealedRow]:
    """Walk with `limit` while nothing changes: every sealed row of `rows` exactly once, each
    returned row one the test wrote and still holds, with its texts. The walk's rows by (table, id)."""
    found = await walk(backend, limit, max_pages=page_budget(rows, limit))
    counts = Counter((row.table, row.id) for row in found)
    expected = rows.sealed
    wrong = {f"{table}:{row_id}": counts[(table, row_id)] for table, row_id in expected if counts[(table, row_id)] != 1}
    if wrong:
        held = {f"{table}:{row_id}": rows.items[(table, row_id)] for table, row_id in expected}
        raise AssertionError(
            f"a walk with limit {limit} must return each of the {len(expected)} sealed rows once; these came back "
            f"this many times: {wrong} (what they hold: {[held[key] for key in sorted(wrong)]})"
        )
    by_key: dict[tuple[str, str], SealedRow] = {}
    for row in found:
        key = (row.table, row.id)
        item = rows.items.get(key)
        if item is None:
            gone = "deleted before the walk" if key in rows.deleted else "the test never wrote"
            raise AssertionError(f"a walk returned {key}, a row {gone}: {row!r}")
        check_texts(row, item)
        by_key[key] = row
    return by_key


async def must_walk_row(backend: Backend, rows: Rows, key: tuple[str, str]) -> SealedRow:
    """The row `key` as a full walk returns it now."""
    found = await assert_walk(backend, rows, LARGE_LIMIT)
    if key not in found:
        raise AssertionError(f"a walk did not return the sealed row {key}")
    return found[key]


# -- re-sealing -------------------------------------------------------------------------------


async def reseal(backend: Backend, params: ResealRowParams) -> bool:
    written = await backend.reseal_row(params)
    if not isinstance(written, bool):
        raise AssertionError(f"reseal_row({params!r}) returned {written!r}, not a bool")
    return written


async def must_get_dead(backend: Backend, job_id: str) -> Any:
    dead_row = await backend.get_dead_letter(GetDeadLetterParams(job_id=job_id))
    if dead_row is None:
        raise AssertionError(f"get_dead_letter({job_id!r}) returned None; the row should exist")
    return dead_row


def same_but(row: JobRecord, before: JobRecord, *names: str, what: str) -> None:
    """`row` equals `before` but for `names` (and `updated_at`, which a store may bump)."""
    if fields_except(row, *names, "updated_at") != fields_except(before, *names, "updated_at"):
        raise AssertionError(f"{what} changed more than {names}: before {before!r}, after {row!r}")


class KeyRotationContract:
    async def test_key_rotation_walk_returns_every_sealed_row_once_with_its_stored_text(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            rows = Rows()
            await every_kind(backend, rows)
            assert len(rows.sealed) >= 10
            for limit in (*LIMITS, LARGE_LIMIT):
                await assert_walk(backend, rows, limit)
            if has_role(backend, DeadLetterStore):
                # The dead-letter texts are what the dead-letter reads return.
                for (table, row_id), item in rows.items.items():
                    if table == DEAD_LETTER:
                        assert dict((await must_get_dead(backend, row_id)).args) == item.args
            for (table, row_id), item in rows.items.items():
                if table == JOBS:
                    stored = await must_get(backend, row_id)
                    assert (dict(stored.args), stored.result) == (item.args, item.result)

    async def test_key_rotation_walk_of_a_store_without_sealed_values_ends(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            rows = Rows()
            for limit in LIMITS:
                assert await walk(backend, limit, max_pages=page_budget(rows, limit)) == []
            plain = [kind for kind in kinds_for(backend) if "plain" in kind or "null" in kind]
            await build(backend, rows, [(kind, {"n": n}) for n in range(3) for kind in plain])
            assert rows.items
            assert not rows.sealed
            for limit in LIMITS:
                await assert_walk(backend, rows, limit)

    async def test_key_rotation_walks_of_drawn_mixes_return_every_sealed_row_once(
        self, contract: ContractHarness
    ) -> None:
        plain_args = st.dictionaries(plain_names(), json_values(), max_size=3)
        mixes = st.lists(st.tuples(st.sampled_from(sorted(KINDS)), plain_args), max_size=10)
        examples = draw(st.tuples(mixes, st.integers(min_value=1, max_value=6)))
        async with contract.backend() as backend:
            rows = Rows()
            # One store for every example: each walk meets the rows of the earlier ones as well.
            for mix, limit in examples:
                await build(backend, rows, mix)
                try:
                    await assert_walk(backend, rows, limit)
                except AssertionError as error:
                    raise AssertionError(f"after adding {mix!r}, a walk with limit {limit}: {error}") from None

    async def test_key_rotation_walk_finds_rows_left_alone_once_while_others_come_and_go(
        self, contract: ContractHarness
    ) -> None:
        for limit in LIMITS:
            async with contract.backend() as backend:
                rows = Rows()
                await every_kind(backend, rows)
                unchanged = set(rows.items)
                cursor: str | None = None
                found: list[SealedRow] = []
                for number in range(page_budget(rows, limit) * 2):
                    page = await backend.sealed_rows(SealedRowsParams(cursor=cursor, limit=limit))
                    assert len(page.rows) <= limit
                    found.extend(page.rows)
                    # Meanwhile: a jobs row this page returned is deleted and, for the first pages
                    # (a walk need not outrun endless arrivals), a sealed and a plain row arrive.
                    for row in page.rows:
                        key = (row.table, row.id)
                        if row.table == JOBS and key in rows.items:
                            assert await backend.delete_job(DeleteJobParams(job_id=row.id)) is True
                            rows.remove(key)
                            unchanged.discard(key)
                            break
                    if number < ARRIVING_PAGES:
                        await queued(backend, rows, envelope({"late": True}))
                        await queued(backend, rows, {"late": True})
                    if page.next_cursor is None:
                        break
                    cursor = page.next_cursor
                else:
                    raise AssertionError(f"a walk with limit {limit} did not end while rows came and went")
                counts = Counter((row.table, row.id) for row in found)
                missed = {f"{table}:{row_id}": counts[(table, row_id)] for table, row_id in rows.sealed & unchanged}
                missed = {key: count for key, count in missed.items() if count != 1}
                assert not missed, (
                    f"limit {limit}: the sealed rows nobody touched during the walk must come back once each "
                    f"while others are deleted and added; these came back this many times: {missed}"
                )
                for row in found:
                    key = (row.table, row.id)
                    if key in unchanged:
                        check_texts(row, rows.items[key])

    async def test_key_rotation_reseal_writes_the_new_values_and_nothing_else(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            rows = Rows()
            waiting = await queued(backend, rows, envelope({"to": "a"}))
            finished = await done(backend, rows, envelope({"to": "b"}), envelope({"sent": True}))
            plain = await queued(backend, rows, {"to": "c"})
            found = await assert_walk(backend, rows, LARGE_LIMIT)
            before = {item.id: await must_get(backend, item.id) for item in (waiting, finished, plain)}

            new_args = envelope({"to": "a"})
            assert await reseal(
                backend,
                ResealRowParams(JOBS, waiting.id, args_json=(found[waiting.key].args_json or "", json_text(new_args))),
            ), "reseal_row with the texts the walk returned did not write"
            after = await must_get(backend, waiting.id)
            assert dict(after.args) == new_args, f"get_job after reseal_row shows args {after.args!r}"
            same_but(after, before[waiting.id], "args", what="reseal_row of the args")
            waiting.args = new_args

            new_finished = (envelope({"to": "b"}), envelope({"sent": True}))
            row = found[finished.key]
            assert await reseal(
                backend,
                ResealRowParams(
                    JOBS,
                    finished.id,
                    args_json=(row.args_json or "", json_text(new_finished[0])),
                    result_json=(row.result_json or "", json_text(new_finished[1])),
                ),
            ), "reseal_row of args and result with the texts the walk returned did not write"
            after = await must_get(backend, finished.id)
            assert (dict(after.args), after.result) == new_finished
            same_but(after, before[finished.id], "args", "result", what="reseal_row of args and result")
            finished.args, finished.result = new_finished

            assert await must_get(backend, plain.id) == before[plain.id]
            # The next walk returns the new texts; the first walk's are stale now.
            await assert_walk(backend, rows, 1)
            assert not await reseal(
                backend,
                ResealRowParams(
                    JOBS, waiting.id, args_json=(found[waiting.key].args_json or "", json_text(envelope()))
                ),
            ), "reseal_row with the args text from before the last reseal wrote"
            assert dict((await must_get(backend, waiting.id)).args) == new_args

    async def test_key_rotation_reseal_with_a_stale_value_writes_no_field(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            rows = Rows()
            item = await done(backend, rows, envelope({"a": 1}), envelope({"r": 1}))
            row = (await assert_walk(backend, rows, LARGE_LIMIT))[item.key]
            before = await must_get(backend, item.id)
            assert row.args_json is not None
            assert row.result_json is not None
            stale = json_text(envelope({"a": 1}))  # the same value sealed again: another token
            new_args, new_result = json_text(envelope({"a": 1})), json_text(envelope({"r": 1}))
            for args_old, result_old in ((row.args_json, stale), (stale, row.result_json), (stale, stale)):
                assert not await reseal(
                    backend,
                    ResealRowParams(
                        JOBS, item.id, args_json=(args_old, new_args), result_json=(result_old, new_result)
                    ),
                ), f"reseal_row wrote although {'args' if args_old == stale else 'result'} had changed"
                assert await must_get(backend, item.id) == before, "a reseal_row that returned False wrote a field"
            for args_old in (json_text({"a": 1}), "{}", json_text({ENVELOPE_KEY: "not the token"})):
                assert not await reseal(backend, ResealRowParams(JOBS, item.id, args_json=(args_old, new_args)))
            assert await must_get(backend, item.id) == before
            # The texts the walk returned still write both.
            assert await reseal(
                backend,
                ResealRowParams(
                    JOBS, item.id, args_json=(row.args_json, new_args), result_json=(row.result_json, new_result)
                ),
            )
            after = await must_get(backend, item.id)
            assert (dict(after.args), after.result) == (json.loads(new_args), json.loads(new_result))

    async def test_key_rotation_reseal_of_a_row_that_is_gone_is_false(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            rows = Rows()
            deleted = await queued(backend, rows, envelope({"n": 1}))
            with_progress = None
            if has_role(backend, JobProgressStore):
                with_progress = await running(backend, rows, {"n": 2}, progress_value(sealed_message()))
            claimed = await enqueue_and_claim(backend, worker_id=WORKER, mark_started=True, args=envelope({"n": 3}))
            rows.add(Stored(JOBS, claimed.id, dict(claimed.args)))
            found = await assert_walk(backend, rows, LARGE_LIMIT)
            new = json_text(envelope({"n": 0}))
            for table in (JOBS, DEAD_LETTER):
                assert not await reseal(
                    backend, ResealRowParams(table, MISSING_JOB_ID, args_json=(json_text(envelope()), new))
                ), f"reseal_row of a {table} row that never existed returned True"
            assert await backend.get_job(GetJobParams(job_id=MISSING_JOB_ID)) is None

            assert await backend.delete_job(DeleteJobParams(job_id=deleted.id)) is True
            rows.remove(deleted.key)
            assert not await reseal(
                backend, ResealRowParams(JOBS, deleted.id, args_json=(found[deleted.key].args_json or "", new))
            ), "reseal_row of a deleted row returned True"
            assert await backend.get_job(GetJobParams(job_id=deleted.id)) is None, "reseal_row brought a row back"

            # Dead-lettered after the read: the jobs row is gone, the dead-letter row keeps its args.
            assert await backend.dead_letter_job(
                DeadLetterJobParams(job_id=claimed.id, worker_id=WORKER, error="gave up", reason="max_attempts")
            )
            rows.remove((JOBS, claimed.id))
            dead_item = rows.add(Stored(DEAD_LETTER, claimed.id, dict(claimed.args)))
            assert not await reseal(
                backend, ResealRowParams(JOBS, claimed.id, args_json=(found[(JOBS, claimed.id)].args_json or "", new))
            ), "reseal_row of a jobs row moved to the dead-letter table returned True"
            assert await backend.get_job(GetJobParams(job_id=claimed.id)) is None, "reseal_row brought a row back"
            await assert_walk(backend, rows, 2)  # the dead-letter row still holds its args
            assert dead_item.sealed
            if with_progress is not None:
                assert await backend.delete_job(DeleteJobParams(job_id=with_progress.id)) is True
                rows.remove(with_progress.key)
                old = found[with_progress.key].progress_json or ""
                assert not await reseal(backend, ResealRowParams(JOBS, with_progress.id, progress_json=(old, new))), (
                    "reseal_row of the progress of a deleted row returned True"
                )
                assert await backend.get_job(GetJobParams(job_id=with_progress.id)) is None

    async def test_key_rotation_reseal_rewrites_a_dead_letter_row(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            rows = Rows()
            item = await dead(backend, rows, envelope({"to": "d"}))
            other = await dead(backend, rows, envelope({"to": "e"}))
            row = await must_walk_row(backend, rows, item.key)
            before = await must_get_dead(backend, item.id) if has_role(backend, DeadLetterStore) else None
            new_args = envelope({"to": "d"})
            stale = json_text(envelope({"to": "d"}))
            assert not await reseal(
                backend, ResealRowParams(DEAD_LETTER, item.id, args_json=(stale, json_text(new_args)))
            )
            await assert_walk(backend, rows, 1)
            # The same id in the other table is another row.
            assert not await reseal(
                backend, ResealRowParams(JOBS, item.id, args_json=(row.args_json or "", json_text(new_args)))
            ), "reseal_row of table 'jobs' wrote to a dead-letter row"
            assert await reseal(
                backend, ResealRowParams(DEAD_LETTER, item.id, args_json=(row.args_json or "", json_text(new_args)))
            ), "reseal_row of a dead-letter row with the text the walk returned did not write"
            item.args = new_args
            await assert_walk(backend, rows, 1)
            assert await backend.get_job(GetJobParams(job_id=item.id)) is None, "reseal_row made a jobs row"
            if before is not None:
                after = await must_get_dead(backend, item.id)
                assert dict(after.args) == new_args
                assert replace(after, args={}) == replace(before, args={}), "reseal_row changed more than the args"
                assert dict((await must_get_dead(backend, other.id)).args) == other.args
            assert not await reseal(
                backend, ResealRowParams(DEAD_LETTER, item.id, args_json=(row.args_json or "", json_text(envelope())))
            ), "reseal_row with the text from before the last reseal wrote"

    async def test_key_rotation_reseal_of_a_purged_dead_letter_is_false(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            rows = Rows()
            item = await dead(backend, rows, envelope({"to": "p"}))
            row = await must_walk_row(backend, rows, item.key)
            assert await backend.purge_dead_letter(PurgeDeadLetterParams(job_id=item.id)) is True
            rows.remove(item.key)
            assert not await reseal(
                backend, ResealRowParams(DEAD_LETTER, item.id, args_json=(row.args_json or "", json_text(envelope())))
            ), "reseal_row of a purged dead-letter row returned True"
            assert await backend.get_dead_letter(GetDeadLetterParams(job_id=item.id)) is None
            await assert_walk(backend, rows, 1)

    async def test_key_rotation_reseal_rewrites_a_sealed_progress_message_and_the_worker_wins(
        self, contract: ContractHarness
    ) -> None:
        async with contract.backend() as backend:
            rows = Rows()
            item = await running(backend, rows, {"n": 1}, progress_value(sealed_message("one")))
            row = await must_walk_row(backend, rows, item.key)
            assert item.progress is not None
            assert row.progress_json is not None
            before = await must_get(backend, item.id)
            new_progress = {**item.progress, "message": sealed_message("one")}
            assert await reseal(
                backend, ResealRowParams(JOBS, item.id, progress_json=(row.progress_json, json_text(new_progress)))
            ), "reseal_row of a sealed progress message with the text the walk returned did not write"
            after = await must_get(backend, item.id)
            assert after.progress is not None
            assert dict(after.progress) == new_progress
            same_but(after, before, "progress", what="reseal_row of the progress")
            item.progress = new_progress
            # The row's worker still owns it and writes on.
            row = await must_walk_row(backend, rows, item.key)
            assert row.progress_json is not None
            worker_progress = progress_value(sealed_message("two"), done=4)
            assert await save_progress(backend, item.id, worker_progress)
            assert not await reseal(
                backend,
                ResealRowParams(
                    JOBS, item.id, progress_json=(row.progress_json, json_text({**new_progress, "message": "x"}))
                ),
            ), "reseal_row wrote over progress the worker saved after the read"
            stored = await must_get(backend, item.id)
            assert stored.progress is not None
            assert dict(stored.progress) == worker_progress
            item.progress = worker_progress
            await assert_walk(backend, rows, 1)

    async def test_key_rotation_reseal_leaves_the_rest_of_the_row_to_its_worker(
        self, contract: ContractHarness
    ) -> None:
        """Only the given fields are compared: a claim or a result written since the read does not
        stop a reseal of the args, and the worker's fence and result stand."""
        async with contract.backend() as backend:
            rows = Rows()
            item = await queued(backend, rows, envelope({"job": 1}))
            row = await must_walk_row(backend, rows, item.key)
            claimed = await backend.claim_jobs(
                ClaimJobsParams(worker_id=WORKER, queues=["default"], limit=1, mark_started=True)
            )
            assert [job.id for job in claimed] == [item.id]
            new_args = envelope({"job": 1})
            assert await reseal(
                backend, ResealRowParams(JOBS, item.id, args_json=(row.args_json or "", json_text(new_args)))
            ), "reseal_row of unchanged args did not write because the row was claimed meanwhile"
            after = await must_get(backend, item.id)
            assert (after.status, after.worker_id, dict(after.args)) == (JobStatus.PROCESSING, WORKER, new_args)
            item.args = new_args
            row = await must_walk_row(backend, rows, item.key)
            result = envelope({"answer": 42})
            assert await complete_one(backend, job_id=item.id, worker_id=WORKER, result=result), (
                "the owner's completion was refused after a reseal of its row"
            )
            newer_args = envelope({"job": 1})
            assert await reseal(
                backend, ResealRowParams(JOBS, item.id, args_json=(row.args_json or "", json_text(newer_args)))
            )
            finished = await must_get(backend, item.id)
            assert (finished.status, dict(finished.args), finished.result) == (JobStatus.DONE, newer_args, result)
            item.args, item.result = newer_args, result
            await assert_walk(backend, rows, 1)

    async def test_key_rotation_by_rotate_keys_reseals_every_stored_value_with_the_newest_key(
        self, contract: ContractHarness
    ) -> None:
        if not available():
            pytest.skip("rotating keys end to end needs the cryptography package (soniq-core[encryption])")
        old_key, new_key, lost_key = generate_key(), generate_key(), generate_key()
        old, newest, both = Cipher((old_key,)), Cipher((new_key,)), Cipher((new_key, old_key))
        lost = Cipher((lost_key,))
        async with contract.backend() as backend:
            rows = Rows()
            plaintext: dict[tuple[str, str], dict[str, Any]] = {}

            async def keep(item: object, **values: Any) -> None:
                assert isinstance(item, Stored)
                plaintext[item.key] = values

            await keep(await queued(backend, rows, old.seal({"a": 1})), args={"a": 1})
            await keep(
                await done(backend, rows, old.seal({"b": 2}), old.seal({"ok": True})),
                args={"b": 2},
                result={"ok": True},
            )
            await keep(await done(backend, rows, {"plain": 1}, old.seal([1, 2])), result=[1, 2])
            await keep(await dead(backend, rows, old.seal({"d": 4})), args={"d": 4})
            if has_role(backend, JobProgressStore):
                await keep(
                    await running(backend, rows, {"p": 1}, progress_value(old.seal_text("half"))), message="half"
                )
            current = await queued(backend, rows, newest.seal({"c": 3}))
            undecryptable = await queued(backend, rows, lost.seal({"x": 0}))
            for n in range(3):
                await queued(backend, rows, {"n": n})
            report = await rotate_keys(backend, both, batch_size=2)
            assert (report.rows_resealed, report.rows_changed_meanwhile, report.undecryptable) == (
                len(plaintext),
                0,
                1,
            ), report.to_dict()
            assert report.undecryptable_rows == [f"{JOBS}:{undecryptable.id}"]
            found = await walk(backend, 3, max_pages=page_budget(rows, 3))
            by_key = {(row.table, row.id): row for row in found}
            for key, values in plaintext.items():
                row = by_key[key]
                if "args" in values:
                    assert newest.open(parsed(row.args_json, "args_json")) == values["args"], key
                if "result" in values:
                    assert newest.open(parsed(row.result_json, "result_json")) == values["result"], key
                if "message" in values:
                    message = parsed(row.progress_json, "progress_json")["message"]
                    assert newest.open_text(message) == values["message"], key
                if key[0] == JOBS:
                    stored = await must_get(backend, key[1])
                    if "args" in values:
                        assert newest.open(stored.args) == values["args"]
                    if "result" in values:
                        assert newest.open(stored.result) == values["result"]
            assert parsed(by_key[current.key].args_json, "args_json") == current.args, "a current value was re-sealed"
            assert parsed(by_key[undecryptable.key].args_json, "args_json") == undecryptable.args
            again = await rotate_keys(backend, both, batch_size=3)
            assert (again.rows_resealed, again.undecryptable) == (0, 1), again.to_dict()
