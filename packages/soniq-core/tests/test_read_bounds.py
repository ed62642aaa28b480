"""Hostile values on the read commands, through a real `soniq` process.

A byte that is not UTF-8 in an argument reaches Python as a lone surrogate (``$'\\xff'`` is
``'\\udcff'``); a control character comes through as itself. Both used to reach the driver (a raw
UnicodeEncodeError from SQLite's); now a queue is refused with one line naming ``queue`` and an id
is "no job has that id". The contract suite (`soniq_contract_tests.suite.read_bounds`) checks the
app API itself on every backend.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_process import run_soniq, succeeded


@pytest.fixture
def database(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    succeeded(run_soniq("setup", "--database-url", url, cwd=tmp_path))
    return url


def one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("soniq: error: "), stderr
    return lines[0].removeprefix("soniq: error: ")


@pytest.mark.parametrize(
    ("queue", "expected"),
    [
        ("\udcff", r"queue '\udcff' contains a lone surrogate (U+DCFF)"),
        ("a\x01", r"queue 'a\x01' contains a control character (U+0001)"),
    ],
)
def test_soniq_status_refuses_a_queue_no_store_can_hold_in_one_line(
    database: str, tmp_path: Path, queue: str, expected: str
) -> None:
    result = run_soniq("status", "--database-url", database, "--queue", queue, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert one_error_line(result.stderr) == expected
    assert result.stdout == ""


def test_soniq_cancel_of_an_id_no_store_can_hold_is_not_found(database: str, tmp_path: Path) -> None:
    result = run_soniq("cancel", "--database-url", database, "\udcff", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert one_error_line(result.stderr) == r"cannot cancel job \udcff: no job has that id"
