"""The chaos suite on SQLite: several real worker processes on one file, SIGTERM/SIGKILL and restart.

Short by default (``SONIQ_CHAOS_JOBS`` / ``SONIQ_CHAOS_SECONDS`` make it long).
There is no server connection to cut on SQLite; process faults are the model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from soniq_contract_tests.chaos import ChaosConfig, PoisonConfig, run_chaos, run_poisoned

pytestmark = [pytest.mark.asyncio, pytest.mark.chaos]


async def test_every_job_ends_once_done_or_dead_lettered_under_faults(tmp_path: Path) -> None:
    config = ChaosConfig(
        url=f"sqlite:///{tmp_path / 'chaos.db'}", namespace="chaos", directory=tmp_path, label="sqlite"
    )
    report = await run_chaos(config)
    print(report.text())
    assert report.faults["sigkill"] > 0
    assert report.faults["sigterm"] + report.faults["sigterm_twice"] > 0
    assert report.violations == []


async def test_poisoned_jobs_end_in_the_dead_letter_table_and_hold_nothing_else_up(tmp_path: Path) -> None:
    config = PoisonConfig(
        url=f"sqlite:///{tmp_path / 'poison.db'}", namespace="poison", directory=tmp_path, label="sqlite"
    )
    report = await run_poisoned(config)
    print(report.text())
    assert report.violations == []
    assert report.verdict.ends == {"done": config.jobs}
