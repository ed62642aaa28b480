#!/usr/bin/env python3
"""What a release's new features cost a queue that does not use them: this source against an older one.

    python3 benchmarks/feature_overhead.py [--base REF] [--runs N] [--jobs N] [--json out.json]

Issue 19 (fleet-wide limits, dependencies, cancelling running jobs, waiting for
results) set a budget: processing with none of those features in use may lose
at most 5%. This script measures exactly that. It exports `--base` (a git ref,
by default the last commit before backend protocol 4) with `git archive`, installs
it into its own virtualenv beside this source's (`benchmarks/.envs/ours-base`
and `ours`, as `run.py` does), and drains `--jobs` no-op jobs with one real
`soniq worker` process (concurrency 10) on PostgreSQL and on SQLite, alternating
the two sources repetition by repetition. Reported: jobs/s of each drain and,
per backend, the median over repetitions of (this source / base), paired by
repetition so that drift in the machine's load cancels out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import run as harness  # noqa: E402  (benchmarks/run.py: venvs and the driver protocol)

DEFAULT_BASE = "b7f5072"
"""The last commit before backend protocol 4 (issue 19)."""
BUDGET = 0.95
"""This source must keep at least 95% of the base's rate."""
PACKAGES = ("soniq-core", "soniq-postgres", "soniq-sqlite")


def export_base(ref: str) -> Path:
    """`git archive` the three packages at `ref` into benchmarks/.envs/src-<sha>; returns that folder."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short=12", f"{ref}^{{commit}}"],
        cwd=harness.REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    target = harness.ENVS / f"src-{sha}"
    if not (target / "packages" / "soniq-core" / "pyproject.toml").exists():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", "--format=tar", sha, *(f"packages/{p}" for p in PACKAGES)],
            cwd=harness.REPO,
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def measure(column: harness.Column, *, jobs: int, sqlite: bool, timeout: float) -> dict[str, Any]:
    args = ["process", str(jobs), "--workers", "1", "--timeout", str(timeout)]
    if sqlite:
        args.append("--sqlite")
    return harness.call_driver(column, args, timeout + 60)


def paired(left: list[dict[str, Any]], right: list[dict[str, Any]]) -> float | None:
    ratios = [
        a["rate"] / b["rate"]
        for a, b in zip(left, right, strict=False)
        if isinstance(a.get("rate"), (int, float)) and isinstance(b.get("rate"), (int, float)) and b["rate"]
    ]
    return statistics.median(ratios) if ratios else None


def median_rate(rows: list[dict[str, Any]]) -> float | None:
    rates = [r["rate"] for r in rows if isinstance(r.get("rate"), (int, float))]
    return statistics.median(rates) if rates else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default=DEFAULT_BASE, help=f"git ref to compare with (default {DEFAULT_BASE})")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--timeout", type=float, default=240.0)
    parser.add_argument("--json", default=str(harness.RESULTS / "feature-overhead-last.json"))
    options = parser.parse_args(argv)

    base_src = export_base(options.base)
    harness.INSTALLS["ours-base"] = [arg for p in PACKAGES for arg in ("-e", str(base_src / "packages" / p))]
    for name in ("ours", "ours-base"):
        harness.ensure_env(name, reinstall=False)
    columns = {
        "this source": harness.Column("this source", "ours", "ours_driver.py"),
        "base": harness.Column("base", "ours-base", "ours_driver.py"),
    }
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {"postgresql": {}, "sqlite": {}}
    for rep in range(options.runs):
        # Alternate which source goes first, so neither always runs on a warmer machine.
        order = list(columns) if rep % 2 == 0 else list(reversed(columns))
        for backend in raw:
            for label in order:
                result = measure(columns[label], jobs=options.jobs, sqlite=backend == "sqlite", timeout=options.timeout)
                raw[backend].setdefault(label, []).append(result)
                shown = f"{result['rate']:,.0f} jobs/s" if "rate" in result else result.get("error")
                print(f"[rep {rep + 1}/{options.runs}] {backend:10} {label:12} {shown}", flush=True)

    report: dict[str, Any] = {
        "base": options.base,
        "source": harness.source_fingerprint(),
        "jobs": options.jobs,
        "runs": options.runs,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "raw": raw,
        "verdicts": {},
    }
    print(f"\n| backend | this source jobs/s | base jobs/s | paired ratio | budget >= {BUDGET:.2f} |")
    print("|---|---|---|---|---|")
    failed = False
    for backend, by_label in raw.items():
        medians = {label: median_rate(rows) for label, rows in by_label.items()}
        value = paired(by_label.get("this source", []), by_label.get("base", []))
        verdict = "n/a" if value is None else ("PASS" if value >= BUDGET else "FAIL")
        failed |= verdict == "FAIL"
        report["verdicts"][backend] = {"ratio": value, "medians": medians, "verdict": verdict}
        shown = "-" if value is None else f"{value:.3f}x"
        mine, theirs = medians.get("this source"), medians.get("base")
        print(
            f"| {backend} | {mine or 0:,.0f} | {theirs or 0:,.0f} | {shown} | {verdict} |",
        )
    Path(options.json).write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten: {options.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
