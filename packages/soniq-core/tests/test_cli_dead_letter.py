"""``soniq dead-letter`` bulk actions as a real process: filters, --dry-run, --yes, export and cleanup."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest
from cli_process import run_soniq
from cli_process import succeeded as ok

JOBS = """
from soniq import Soniq

app = Soniq("sqlite:///jobs.db")


@app.job(name="mail.send", max_retries=0)
async def send(n: int) -> None:
    raise RuntimeError(f"bounced {n}")


@app.job(name="bill.charge", max_retries=0)
async def charge(n: int) -> None:
    raise RuntimeError(f"declined {n}")
"""


def soniq(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_soniq(*args, "--jobs-modules", "myjobs", cwd=cwd)


@pytest.fixture
def dead(tmp_path: Path) -> Path:
    """Three mail.send and two bill.charge rows in the dead-letter table."""
    (tmp_path / "myjobs.py").write_text(JOBS)
    ok(soniq("setup", cwd=tmp_path))
    for name, n in [("mail.send", 1), ("mail.send", 2), ("mail.send", 3), ("bill.charge", 1), ("bill.charge", 2)]:
        ok(soniq("enqueue", name, "--args", json.dumps({"n": n}), cwd=tmp_path))
    ok(soniq("worker", "--run-once", cwd=tmp_path))
    return tmp_path


def total(cwd: Path) -> int:
    return int(json.loads(ok(soniq("dead-letter", "stats", "--json", cwd=cwd)))["total"])


def test_list_stats_and_export_follow_the_filter(dead: Path) -> None:
    listed = ok(soniq("dead-letter", "list", "--filter", "bill.charge", cwd=dead)).splitlines()
    assert len(listed) == 2
    assert all("bill.charge" in line for line in listed)
    stats = json.loads(ok(soniq("dead-letter", "stats", "--json", cwd=dead)))
    assert stats["by_job_name"] == {"bill.charge": 2, "mail.send": 3}
    assert stats["by_reason"] == {"max_attempts": 5}

    out = dead / "mail.csv"
    assert "exported to" in ok(soniq("dead-letter", "export", "--filter", "mail.send", "--output", str(out), cwd=dead))
    rows = list(csv.DictReader(out.open()))
    assert sorted(json.loads(row["args"])["n"] for row in rows) == [1, 2, 3]
    assert all("bounced" in row["last_error"] for row in rows)
    as_json = json.loads(ok(soniq("dead-letter", "export", "--format", "json", "--limit", "2", cwd=dead)))
    assert len(as_json) == 2


def test_bulk_delete_needs_yes_and_honours_dry_run(dead: Path) -> None:
    refused = soniq("dead-letter", "delete", "--all", "--filter", "mail.send", cwd=dead)
    assert refused.returncode == 1
    assert "--yes" in refused.stderr
    assert total(dead) == 5
    dry = ok(soniq("dead-letter", "delete", "--all", "--filter", "mail.send", "--dry-run", cwd=dead))
    assert "would delete 3" in dry
    assert total(dead) == 5
    done = ok(soniq("dead-letter", "delete", "--all", "--filter", "mail.send", "--yes", cwd=dead))
    assert "deleted 3" in done
    assert total(dead) == 2
    both = soniq("dead-letter", "delete", "some-id", "--all", cwd=dead)
    assert both.returncode == 1
    assert "not both" in both.stderr
    missing = soniq("dead-letter", "delete", "no-such-id", cwd=dead)
    assert missing.returncode == 1
    assert "no-such-id" in missing.stderr


def test_bulk_replay_with_overrides_and_cleanup(dead: Path) -> None:
    replayed = ok(
        soniq("dead-letter", "replay", "--all", "--filter", "bill.charge", "--to-queue", "retry", "--yes", cwd=dead)
    )
    assert "replayed 2" in replayed
    on_retry = json.loads(ok(soniq("status", "--json", "--queue", "retry", cwd=dead)))
    assert on_retry["stats"]["queued"] == 2
    stats = json.loads(ok(soniq("dead-letter", "stats", "--json", "--resurrected", "yes", cwd=dead)))
    assert stats["total"] == 2

    bad = soniq("dead-letter", "cleanup", "--days", "-1", cwd=dead)
    assert bad.returncode == 1
    assert "--days" in bad.stderr
    assert "would delete 0" in ok(soniq("dead-letter", "cleanup", "--days", "30", "--dry-run", cwd=dead))
    assert "would delete 5" in ok(soniq("dead-letter", "cleanup", "--days", "0", "--dry-run", cwd=dead))
    assert "deleted 5" in ok(soniq("dead-letter", "cleanup", "--days", "0", "--yes", cwd=dead))
    assert total(dead) == 0


def test_a_bad_date_names_the_option(dead: Path) -> None:
    result = soniq("dead-letter", "list", "--since", "yesterday", cwd=dead)
    assert result.returncode == 1
    assert "--since" in result.stderr
    assert "Traceback" not in result.stderr
