"""The `speed` extra: `soniq worker` on uvloop, stored JSON decoded by orjson, nothing else changed."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from soniq import Soniq, speedups
from soniq.decoding import decode_args, decode_json
from soniq.settings import SettingsError

# Text soniq may find in a store: its own writes, other producers', and hand edits.
STORED_TEXTS = [
    '{"n":1}',
    '{"big":123456789012345678901234567890,"neg":-9223372036854775809,"u64":18446744073709551616}',
    '{"i64":9223372036854775807,"digits":"1234567890123456789012"}',
    '{"f":[0.1,1e16,-0.0,1E5,2.5e-308,1.7976931348623157e308,0.30000000000000004]}',
    '{"nan":NaN,"inf":Infinity,"minf":-Infinity}',
    '{"huge":1e400}',
    '{"s":"\\ud800 lone","pair":"\\ud83d\\ude00","nul":"\\u0000","ctl":"\\t\\n","u":"h\u00e9llo \u2028"}',
    '{"a":1,"a":2}',
    '{"nested":' + "[" * 60 + "]" * 60 + "}",
    '{"deep":' + "[" * 1010 + "]" * 1010 + "}",
    "[1,2,3]",
    '"just a string"',
    '  {"ws" : true , "f" : false , "z" : null}  ',
    "{not json}",
    '{"a":1',
    "",
    '{"a":"\x01 raw control"}',
]


def _decode(text: str | bytes) -> tuple[str, Any]:
    try:
        value = json.loads(text)
    except RecursionError:
        return ("recursion", None)
    except ValueError as exc:
        return ("error", str(exc))
    return ("value", value)


def _same(left: Any, right: Any) -> bool:
    """Equal values of equal types all the way down (1 and 1.0 differ; NaN equals NaN); no recursion."""
    pending = [(left, right)]
    while pending:
        a, b = pending.pop()
        if type(a) is not type(b):
            return False
        if isinstance(a, dict):
            if list(a) != list(b):
                return False
            pending.extend((a[k], b[k]) for k in a)
        elif isinstance(a, list | tuple):
            if len(a) != len(b):
                return False
            pending.extend(zip(a, b, strict=True))
        elif isinstance(a, float) and a != a:
            if b == b:
                return False
        elif a != b:
            return False
    return True


@pytest.mark.parametrize("text", STORED_TEXTS)
@pytest.mark.parametrize("as_bytes", [False, True])
def test_stored_json_decodes_as_the_json_module_decodes_it(text: str, as_bytes: bool) -> None:
    pytest.importorskip("orjson")
    assert speedups.ORJSON
    raw: str | bytes = text.encode("utf-8", "surrogatepass") if as_bytes else text
    expected = _decode(raw)
    try:
        got: tuple[str, Any] = ("value", speedups.loads(raw))
    except RecursionError:
        got = ("recursion", None)
    except ValueError as exc:
        got = ("error", str(exc))
    assert got[0] == expected[0]
    assert _same(got[1], expected[1])
    # What a backend makes of the text (and the reason it gives for a row it cannot use) is unchanged.
    assert _same(decode_json(raw, "args"), _decode_json_plain(raw))


def _decode_json_plain(text: str | bytes) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "args: JSON nested deeper than Python can decode"
    except ValueError as exc:
        return None, f"args: invalid JSON ({exc})"


ARGS = {
    "big": 2**70,
    "neg": -(2**64) - 1,
    "i": 42,
    "f": 0.1,
    "e": 1e16,
    "z": -0.0,
    "text": "h\u00e9llo \u2028 \U0001f600 \t",
    "nested": {"list": [1, 2.5, None, True, False, "x"], "empty": {}},
}


@pytest.mark.asyncio
async def test_job_arguments_round_trip_the_same_with_and_without_orjson(
    tmp_path: Path, fast_settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[dict[str, Any], Any]] = []
    for use_orjson in (True, False):
        if not use_orjson:
            monkeypatch.setattr("soniq.decoding.loads", json.loads)
            monkeypatch.setattr("soniq.serialization.loads", json.loads)
        app = Soniq(f"sqlite:///{tmp_path / f'rt-{use_orjson}.db'}", **fast_settings)

        @app.job(name="echo")
        async def echo(**kwargs: Any) -> Any:
            return kwargs

        await app.setup()
        try:
            job_id = await app.enqueue(echo, **ARGS)
            await app.run_worker(run_once=True, install_signal_handlers=False)
            row = await app.get_job(job_id)
            assert row is not None
            assert row["status"] == "done"
            seen.append((row["args"], row["result"]))
        finally:
            await app.close()
    with_orjson, without = seen
    assert _same(with_orjson[0], ARGS)
    assert _same(with_orjson[1], ARGS)
    assert _same(with_orjson[0], without[0])
    assert _same(with_orjson[1], without[1])


def _worker_loop(tmp_path: Path, event_loop: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "loopjobs.py").write_text(
        "import asyncio\nfrom soniq import Soniq\napp = Soniq('sqlite:///loop.db')\n"
        "@app.job(name='which_loop')\nasync def which_loop() -> str:\n"
        "    return type(asyncio.get_running_loop()).__module__\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONIQ_")}
    env["SONIQ_OBSERVERS"] = ""
    if event_loop is not None:
        env["SONIQ_EVENT_LOOP"] = event_loop

    def soniq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "soniq", *args, "--jobs-modules", "loopjobs"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=env,
        )

    made = soniq("enqueue", "which_loop")
    assert made.returncode == 0, made.stderr
    ran = soniq("worker", "--run-once")
    if ran.returncode != 0:
        return ran
    with sqlite3.connect(tmp_path / "loop.db") as db:
        (result,) = db.execute("SELECT result FROM soniq_jobs WHERE id = ?", (made.stdout.strip(),)).fetchone()
    return subprocess.CompletedProcess(ran.args, 0, json.loads(result), ran.stderr)


def test_the_worker_runs_on_uvloop_when_it_is_installed(tmp_path: Path) -> None:
    pytest.importorskip("uvloop")
    assert _worker_loop(tmp_path, None).stdout.startswith("uvloop")


def test_event_loop_asyncio_keeps_the_standard_loop(tmp_path: Path) -> None:
    assert _worker_loop(tmp_path, "asyncio").stdout.startswith("asyncio")


def test_event_loop_uvloop_without_uvloop_is_a_one_line_error(tmp_path: Path) -> None:
    if speedups.uvloop_available():
        assert _worker_loop(tmp_path, "uvloop").stdout.startswith("uvloop")
        return
    ran = _worker_loop(tmp_path, "uvloop")
    assert ran.returncode == 1
    assert "soniq-core[speed]" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_event_loop_setting_is_checked() -> None:
    with pytest.raises(SettingsError, match="event_loop"):
        Soniq("memory://", event_loop="trio")
    assert Soniq("memory://", event_loop="UVLOOP").settings.event_loop == "uvloop"
    assert decode_args('{"n": 1}') == ({"n": 1}, None)
