"""Encrypted arguments, results and progress messages (`encryption_keys`, `@app.job(encrypted=True)`,
`encrypt_all`) on memory, SQLite and PostgreSQL: only ciphertext at rest, plaintext to the handler and
to `get_result`, "encrypted" on operator screens, `undecryptable` dead letters that replay once the key
is back, and `soniq keys rotate`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_process import run_soniq
from hypothesis import given, settings
from hypothesis import strategies as st

from soniq import JobContext, JobOptionsError, Soniq
from soniq.encryption import ENVELOPE_KEY, SHOWN, Cipher, UndecryptableError, cipher_for, generate_key, is_envelope
from soniq.errors import SettingsError
from soniq.key_rotation import rotate_keys
from soniq.params import GetJobParams
from soniq.redaction import redact_data

on_stores = pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"], indirect=True)

OLD, NEW = generate_key(), generate_key()
SECRET = "4111-1111-1111-1111"


async def run_once(app: Soniq) -> None:
    await asyncio.wait_for(app.run_worker(run_once=True, install_signal_handlers=False), 20)


async def raw_row(app: Soniq, job_id: str) -> Any:
    backend = await app.connected_backend()
    return await backend.get_job(GetJobParams(job_id=job_id))


@on_stores
@pytest.mark.asyncio
async def test_the_store_holds_only_ciphertext_and_the_handler_and_get_result_see_plaintext(
    make_app: Callable[..., Soniq],
) -> None:
    app = make_app(encryption_keys=[NEW])
    seen: list[str] = []

    @app.job(encrypted=True)
    async def charge(card: str, ctx: JobContext) -> dict[str, str]:
        seen.append(card)
        await ctx.progress(1, 2, message=f"charging {card}")
        return {"charged": card}

    job_id = await app.enqueue(charge, card=SECRET)
    row = await raw_row(app, job_id)
    assert is_envelope(row.args)
    assert SECRET not in json.dumps(row.args)
    assert (await app.get_job(job_id) or {})["args"] == SHOWN
    await run_once(app)
    assert seen == [SECRET]
    row = await raw_row(app, job_id)
    assert is_envelope(row.result)
    assert SECRET not in json.dumps(row.result)
    assert SECRET not in json.dumps(row.progress)
    shown = await app.get_job(job_id)
    assert shown is not None
    assert shown["result"] == SHOWN
    assert shown["progress"]["message"] == SHOWN
    assert shown["progress"]["done"] == 1
    assert await app.get_result(job_id) == {"charged": SECRET}
    assert await app.wait_for(job_id, timeout=5) == {"charged": SECRET}


@on_stores
@pytest.mark.asyncio
async def test_encrypt_all_seals_every_job_and_a_plain_app_leaves_rows_readable(
    make_app: Callable[..., Soniq],
) -> None:
    app = make_app(encryption_keys=[NEW], encrypt_all=True)

    @app.job()
    async def note(text: str) -> str:
        return text.upper()

    job_id = await app.enqueue(note, text="hello")
    assert is_envelope((await raw_row(app, job_id)).args)
    await run_once(app)
    assert await app.get_result(job_id) == "HELLO"
    assert is_envelope((await raw_row(app, job_id)).result)

    plain = make_app()

    @plain.job()
    async def echo(text: str) -> str:
        return text

    other = await plain.enqueue(echo, text="visible")
    assert (await raw_row(plain, other)).args == {"text": "visible"}


@on_stores
@pytest.mark.asyncio
async def test_a_row_no_key_opens_is_dead_lettered_undecryptable_and_replays_once_the_key_is_back(
    make_app: Callable[..., Soniq], wait_until: Callable[..., Any]
) -> None:
    producer = make_app(encryption_keys=[OLD])
    ran: list[int] = []

    def declare(app: Soniq) -> None:
        @app.job(name="vault.open", encrypted=True, max_retries=3)
        async def open_vault(n: int) -> int:
            ran.append(n)
            return n

    declare(producer)
    job_id = await producer.enqueue("vault.open", n=7)
    lost_key = make_app(encryption_keys=[NEW])  # the old key was dropped before rotating
    declare(lost_key)
    await run_once(lost_key)
    dead = await lost_key.get_job(job_id)
    assert dead is not None
    assert dead["status"] == "dead_letter"
    assert dead["dead_letter_reason"] == "undecryptable"
    assert dead["args"] == SHOWN
    assert ran == []  # one look, no retries: no attempt could ever open it
    key_back = make_app(encryption_keys=[NEW, OLD])
    declare(key_back)
    copy = await key_back.dead_letter.replay(job_id)
    await run_once(key_back)
    assert ran == [7]
    assert await key_back.get_result(copy) == 7


@on_stores
@pytest.mark.asyncio
async def test_rotation_reseals_every_stored_value_with_the_newest_key(
    make_app: Callable[..., Soniq],
) -> None:
    app = make_app(encryption_keys=[OLD])

    @app.job(name="vault.store", encrypted=True, max_retries=0)
    async def store(n: int) -> int:
        if n == 2:
            raise ValueError("two")
        return n

    ids = [await app.enqueue(store, n=n) for n in range(4)]
    await run_once(app)  # 0, 1, 3 done (sealed results), 2 dead-lettered (sealed args)
    await app.enqueue(store, n=9)  # a queued row, sealed args
    backend = await app.connected_backend()
    report = await rotate_keys(backend, cipher_for((NEW, OLD)), batch_size=2)
    assert report.undecryptable == 0
    assert report.values_resealed == 3 * 2 + 1 + 1  # three done rows (args, result), a dead letter, a queued row
    # With the new key alone, a walk finds nothing it cannot open and nothing left to re-seal.
    again = await rotate_keys(backend, Cipher([NEW]))
    assert (again.values_resealed, again.undecryptable) == (0, 0)
    assert again.rows_read >= 5
    assert Cipher([NEW]).open((await raw_row(app, ids[0])).result) == 0


# -- refused where it enters ----------------------------------------------------------------


@given(text=st.text(min_size=1, max_size=60).filter(lambda t: "," not in t and t.strip()))
@settings(max_examples=80, deadline=None)
def test_a_bad_key_is_refused_naming_the_setting_never_the_key(text: str) -> None:
    message = _refusal(text)
    if message is None:
        Cipher([text.strip()])  # accepted only when it really is a Fernet key
        return
    assert "encryption_keys" in message
    if len(text.strip()) >= 8:
        assert text.strip() not in message


def _refusal(key: str) -> str | None:
    try:
        Soniq("memory://", encryption_keys=[key], observers="")
    except SettingsError as exc:
        return str(exc)
    return None


def test_encryption_needs_a_key_and_keys_never_show_in_a_repr() -> None:
    with pytest.raises(SettingsError, match="encrypt_all"):
        Soniq("memory://", encrypt_all=True, observers="")
    app = Soniq("memory://", observers="")
    with pytest.raises(JobOptionsError, match="encryption_keys"):

        @app.job(encrypted=True)
        async def job() -> None:
            return None

    keyed = Soniq("memory://", encryption_keys=f"{NEW},{OLD}", observers="")
    assert keyed.settings.encryption_keys == (NEW, OLD)
    assert NEW not in repr(keyed.settings)
    assert "<2 key(s)>" in repr(keyed.settings)
    with pytest.raises(SettingsError, match="twice"):
        Soniq("memory://", encryption_keys=[NEW, NEW], observers="")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10).filter(lambda t: "\x00" not in t),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@given(value=json_values)
@settings(max_examples=80, deadline=None)
def test_sealed_values_open_to_what_was_sealed_and_only_with_a_listed_key(value: Any) -> None:
    old, both, other = Cipher([OLD]), Cipher([NEW, OLD]), Cipher([generate_key()])
    sealed = old.seal(value)
    assert set(sealed) == {ENVELOPE_KEY}
    assert both.open(sealed) == value
    with pytest.raises(UndecryptableError):
        other.open(sealed)
    rotated = both.reseal(sealed)
    assert Cipher([NEW]).open(rotated) == value
    assert redact_data({"nested": sealed}) == {"nested": SHOWN}


def test_soniq_keys_generate_and_rotate_from_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "sealed_jobs.py").write_text(
        "from soniq import Soniq\n"
        "app = Soniq()\n"
        "@app.job(name='sealed.echo', encrypted=True)\n"
        "async def echo(text: str) -> str:\n"
        "    return text\n"
    )
    generated = run_soniq("keys", "generate", cwd=tmp_path)
    assert generated.returncode == 0, generated.stderr
    key = generated.stdout.strip()
    Cipher([key])  # a usable Fernet key
    url = f"sqlite:///{tmp_path / 'queue.db'}"

    async def enqueue() -> str:
        app = Soniq(url, encryption_keys=[OLD], observers="")

        @app.job(name="sealed.echo", encrypted=True)
        async def echo(text: str) -> str:
            return text

        job_id = await app.enqueue(echo, text="quiet")
        await app.close()
        return job_id

    job_id = asyncio.run(enqueue())
    env = {"SONIQ_DATABASE_URL": url, "SONIQ_ENCRYPTION_KEYS": f"{key},{OLD}"}
    rotated = run_soniq("keys", "rotate", "--json", "--batch-size", "1", cwd=tmp_path, env=env)
    assert rotated.returncode == 0, rotated.stderr
    assert json.loads(rotated.stdout)["values_resealed"] == 1

    async def read() -> Any:
        app = Soniq(url, encryption_keys=[key], observers="")
        row = await raw_row(app, job_id)
        await app.close()
        return row

    assert Cipher([key]).open((asyncio.run(read())).args) == {"text": "quiet"}
    lost = run_soniq("keys", "rotate", cwd=tmp_path, env={"SONIQ_DATABASE_URL": url, "SONIQ_ENCRYPTION_KEYS": NEW})
    assert lost.returncode == 3
    assert "no configured key opens" in lost.stdout
