#!/usr/bin/env python3
"""Benchmark this repository's soniq against soniq 0.1.0, pgqueuer, procrastinate, arq and raw asyncpg.

    python benchmarks/run.py [--quick] [--only NAME,...] [--metrics KEY,...] [--runs N] [--json out.json]

Runs with any Python 3.11+ (standard library only). Each system gets its own
virtualenv under benchmarks/.envs/<name> and its own fresh database
bench_<name> on postgresql://postgres@127.0.0.1:5432; its driver
(drivers/<name>_driver.py) runs inside that venv and prints one JSON line per
measurement. Repetitions are interleaved across systems (rep 1 of every
system, then rep 2, ...) so that drift in the machine's load hits all of them
alike; each figure is the median over the repetitions. The Redis metric
uses database BENCH_REDIS_DB (default 12) on 127.0.0.1:6379 and deletes only
the keys its systems created.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
ENVS = BENCH / ".envs"
DRIVERS = BENCH / "drivers"
RESULTS = BENCH / "results"
# Worker logs of the last run (the drivers write them here; see drivers/_harness.py).
LOG_DIR = Path(os.environ.get("BENCH_LOG_DIR", tempfile.gettempdir())) / "soniq-bench-logs"

# name -> pip arguments (installed into .envs/<name>)
OURS_PACKAGES = ("soniq-core", "soniq-postgres", "soniq-sqlite", "soniq-redis")
_OURS = [arg for package in OURS_PACKAGES for arg in ("-e", str(REPO / "packages" / package))]
INSTALLS: dict[str, list[str]] = {
    # py-spy is for profile_worker.py only: installed, never imported by a worker.
    "ours": [*_OURS, "py-spy"],
    # The same sources plus the optional speed-ups the worker uses when they are importable
    # (installed directly, so this works whether or not soniq-core has a `speed` extra).
    "ours-speed": [*_OURS, "uvloop", "orjson", "py-spy"],
    "soniq010": ["soniq[sqlite]==0.1.0"],
    "pgqueuer": ["pgqueuer", "asyncpg"],
    "procrastinate": ["procrastinate", "psycopg[binary,pool]", "asyncpg"],
    "arq": ["arq", "asyncpg"],
    "raw": ["asyncpg"],
}
SYSTEMS = ("ours", "ours-speed", "soniq010", "pgqueuer", "procrastinate", "arq", "raw")


@dataclass(frozen=True)
class Column:
    """One column of the table: a system in one configuration, or the raw loop at one batch size."""

    label: str
    env_name: str
    driver: str
    extra_env: dict[str, str] = field(default_factory=dict)
    metrics: tuple[str, ...] | None = None  # None: every metric that allows this column


# The process and latency metrics only: what the optional speed-ups can change.
SPEED_METRICS = ("process_1w", "process_2w", "latency_p50", "sqlite", "redis_1w")

COLUMNS = (
    Column("ours", "ours", "ours_driver.py"),
    Column("ours-speed", "ours-speed", "ours_driver.py", metrics=SPEED_METRICS),
    Column("soniq010", "soniq010", "soniq010_driver.py"),
    Column("pgqueuer", "pgqueuer", "pgqueuer_driver.py", {"BENCH_PGQ_MODE": "default"}),
    Column(
        "pgqueuer-eq",
        "pgqueuer",
        "pgqueuer_driver.py",
        {"BENCH_PGQ_MODE": "eq"},
        metrics=("process_1w", "process_2w", "latency_p50"),
    ),
    Column("procrastinate", "procrastinate", "procrastinate_driver.py"),
    Column("arq", "arq", "arq_driver.py", metrics=("redis_1w",)),
    Column("raw1", "raw", "raw_driver.py", {"BENCH_RAW_BATCH": "1"}),
    Column("raw50", "raw", "raw_driver.py", {"BENCH_RAW_BATCH": "50"}),
)


@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    args: list[str]
    field: str
    unit: str
    columns: tuple[str, ...] | None = None  # None: every column
    higher_is_better: bool = True


@dataclass(frozen=True)
class Sizes:
    runs: int
    single: int
    bulk: int
    process: int
    backlog: int
    latency_jobs: int
    timeout: float
    depth_rows: int = 1_000_000
    memory_jobs: int = 200_000
    memory_mark: int = 10_000
    prefetch: int = 10


FULL = Sizes(runs=3, single=5_000, bulk=5_000, process=5_000, backlog=100_000, latency_jobs=200, timeout=240)
QUICK = Sizes(
    runs=1,
    single=1_000,
    bulk=5_000,
    process=2_000,
    backlog=100_000,
    latency_jobs=200,
    timeout=90,
    memory_jobs=50_000,
)

ENQUEUERS = ("ours", "soniq010", "pgqueuer", "procrastinate", "raw1")
# Pruning as busy as it gets: a pass every 0.1 s (each pass deletes batches until nothing has expired).
DEPTH_WORKER_ENV = ("--worker-env", "SONIQ_PRUNE_INTERVAL=0.1")


def metrics_for(sizes: Sizes) -> list[Metric]:
    t = ["--timeout", str(sizes.timeout)]
    return [
        Metric(
            "enqueue_single",
            f"enqueue, {sizes.single:,} single awaits",
            ["enqueue-single", str(sizes.single)],
            "rate",
            "jobs/s",
            ENQUEUERS,
        ),
        Metric(
            "enqueue_bulk",
            f"enqueue, one bulk call of {sizes.bulk:,}",
            ["enqueue-bulk", str(sizes.bulk)],
            "rate",
            "jobs/s",
            ENQUEUERS,
        ),
        Metric(
            "process_1w",
            f"process {sizes.process:,}, 1 worker x10",
            ["process", str(sizes.process), "--workers", "1", *t],
            "rate",
            "jobs/s",
        ),
        Metric(
            "process_2w",
            f"process {sizes.process:,}, 2 workers x10",
            ["process", str(sizes.process), "--workers", "2", *t],
            "rate",
            "jobs/s",
        ),
        Metric(
            "backlog",
            f"process {sizes.process:,} of {sizes.backlog:,} queued",
            ["process", str(sizes.process), "--backlog", str(sizes.backlog), "--workers", "1", *t],
            "rate",
            "jobs/s",
        ),
        Metric(
            "prefetch_1w",
            f"process {sizes.process:,}, 1 worker x10, prefetch {sizes.prefetch}",
            ["process", str(sizes.process), "--workers", "1", "--worker-env", f"SONIQ_PREFETCH={sizes.prefetch}", *t],
            "rate",
            "jobs/s",
            ("ours",),
        ),
        Metric(
            "depth_1m",
            f"process {sizes.process:,} beside {sizes.depth_rows:,} done rows, pruning",
            [
                "process",
                str(sizes.process),
                "--workers",
                "1",
                "--done-rows",
                str(sizes.depth_rows),
                *DEPTH_WORKER_ENV,
                *t,
            ],
            "rate",
            "jobs/s",
            ("ours",),
        ),
        Metric(
            "memory",
            f"RSS after {sizes.memory_jobs:,} jobs / after {sizes.memory_mark:,}",
            [
                "process",
                str(sizes.memory_jobs),
                "--workers",
                "1",
                "--rss-at",
                str(sizes.memory_mark),
                "--timeout",
                str(max(sizes.timeout, sizes.memory_jobs / 500)),
            ],
            "rss_growth",
            "x",
            ("ours",),
            higher_is_better=False,
        ),
        Metric(
            "redis_1w",
            f"Redis: process {sizes.process:,}, 1 worker x10",
            ["process", str(sizes.process), "--redis", "--workers", "1", *t],
            "rate",
            "jobs/s",
            ("ours", "ours-speed", "arq"),
        ),
        Metric(
            "latency_p50",
            "pickup latency p50",
            ["latency", "--jobs", str(sizes.latency_jobs)],
            "p50_ms",
            "ms",
            higher_is_better=False,
        ),
        Metric("sigterm", "idle SIGTERM to exit", ["sigterm", "--runs", "1"], "ms", "ms", higher_is_better=False),
        Metric(
            "sqlite",
            f"SQLite: process {sizes.process:,}, 1 worker x10",
            ["process", str(sizes.process), "--sqlite", "--workers", "1", *t],
            "rate",
            "jobs/s",
            ("ours", "ours-speed", "soniq010"),
        ),
    ]


# Figures read from another metric's results rather than measured separately.
DERIVED = (
    ("latency_p95", "pickup latency p95", "latency_p50", "p95_ms", "ms"),
    ("rss_busy", "worker RSS after processing", "process_1w", "rss_mb", "MiB"),
    ("rss_idle", "worker RSS idle (after 1 job)", "sigterm", "idle_rss_mb", "MiB"),
    ("rss_mark", "worker RSS at the first mark", "memory", "rss_mark_mb", "MiB"),
    ("rss_end", "worker RSS at the end", "memory", "rss_mb", "MiB"),
    ("depth_pruned", "old rows pruned during the run", "depth_1m", "old_rows_pruned", "rows"),
)


def runs_on(column: Column, metric: Metric) -> bool:
    return (metric.columns is None or column.label in metric.columns) and (
        column.metrics is None or metric.key in column.metrics
    )


# -- environments -------------------------------------------------------------


def venv_python(name: str) -> Path:
    return ENVS / name / "bin" / "python"


def ensure_env(name: str, *, reinstall: bool) -> None:
    marker = ENVS / name / ".bench-installed"
    spec = json.dumps(INSTALLS[name])
    if not reinstall and marker.exists() and marker.read_text() == spec and venv_python(name).exists():
        return
    print(f"[setup] creating venv {name}: pip install {' '.join(INSTALLS[name])}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(ENVS / name)], check=True)
    pip = [str(venv_python(name)), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *INSTALLS[name]], check=True)
    marker.write_text(spec)


def installed_versions(name: str) -> dict[str, str]:
    wanted = {
        "soniq",
        "soniq-core",
        "soniq-postgres",
        "soniq-sqlite",
        "soniq-redis",
        "pgqueuer",
        "procrastinate",
        "arq",
        "redis",
        "asyncpg",
        "psycopg",
        "uvloop",
        "orjson",
        "typer",
    }
    out = subprocess.run(
        [str(venv_python(name)), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return {p["name"]: p["version"] for p in json.loads(out.stdout) if p["name"].lower() in wanted}
    except json.JSONDecodeError:
        return {}


def source_fingerprint() -> str:
    """Short hash of ours' sources: the venv is editable, so edits during a session show up here."""
    digest = hashlib.sha1()
    for package in OURS_PACKAGES:
        for path in sorted((REPO / "packages" / package / "src").rglob("*.py")):
            digest.update(str(path.relative_to(REPO)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


# -- running one measurement ------------------------------------------------------


def call_driver(column: Column, args: list[str], timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    env.update(column.extra_env)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    command = [str(venv_python(column.env_name)), str(DRIVERS / column.driver), *args]
    began = time.monotonic()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(DRIVERS)
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except BaseException as exc:
        # SIGTERM first: the driver then stops the worker processes it started.
        process.terminate()
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            return {"error": f"driver timed out after {timeout:.0f}s"}
        raise
    done = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail) or f"exit {done.returncode}", "wall_s": round(time.monotonic() - began, 2)}
    result: dict[str, Any] = json.loads(lines[-1])
    result["wall_s"] = round(time.monotonic() - began, 2)
    return result


def median_of(values: list[dict[str, Any]], key: str) -> float | None:
    numbers = [v[key] for v in values if isinstance(v.get(key), (int, float))]
    return statistics.median(numbers) if numbers else None


# -- targets --------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def paired_ratio(
    raw: dict[str, dict[str, list[dict[str, Any]]]], a: tuple[str, str], b: tuple[str, str], field_name: str = "rate"
) -> float | None:
    """Median over repetitions of (a in rep i) / (b in rep i).

    Repetitions are interleaved, so rep i of both ran minutes apart at most:
    pairing them cancels most of the drift in the machine's load, which a
    ratio of two medians would not.
    """
    left = raw.get(a[0], {}).get(a[1], [])
    right = raw.get(b[0], {}).get(b[1], [])
    pairs = [ratio(x.get(field_name), y.get(field_name)) for x, y in zip(left, right, strict=False)]
    values = [p for p in pairs if p is not None]
    return statistics.median(values) if values else None


def evaluate_targets(
    summary: dict[str, dict[str, float | None]], raw: dict[str, dict[str, list[dict[str, Any]]]], sizes: Sizes
) -> list[dict[str, Any]]:
    """Every target of issue 18 (and the earlier ones still held), measured in this run.

    A ratio is paired (see `paired_ratio`); `info` rows have no bound: they
    show what the optional speed-ups (uvloop, orjson) change.
    """
    ours = summary.get("ours", {})

    def pr(a: str, ma: str, b: str, mb: str, field_name: str = "rate") -> float | None:
        return paired_ratio(raw, (a, ma), (b, mb), field_name)

    checks: list[tuple[str, float | None, float | None, str, str]] = [
        (
            "processing >= 2x pgqueuer, default CLI (1 worker)",
            pr("ours", "process_1w", "pgqueuer", "process_1w"),
            2.0,
            ">=",
            "x",
        ),
        (
            "processing >= 2x pgqueuer, default CLI (2 workers)",
            pr("ours", "process_2w", "pgqueuer", "process_2w"),
            2.0,
            ">=",
            "x",
        ),
        (
            "processing >= 2x pgqueuer, equal concurrency (1 worker)",
            pr("ours", "process_1w", "pgqueuer-eq", "process_1w"),
            2.0,
            ">=",
            "x",
        ),
        (
            "processing >= 2x pgqueuer, equal concurrency (2 workers)",
            pr("ours", "process_2w", "pgqueuer-eq", "process_2w"),
            2.0,
            ">=",
            "x",
        ),
        (
            "processing >= 0.5x raw 50-row claim loop (1 worker)",
            pr("ours", "process_1w", "raw50", "process_1w"),
            0.5,
            ">=",
            "x",
        ),
        (
            "processing >= 0.25x raw 50-row claim loop (2 workers)",
            pr("ours", "process_2w", "raw50", "process_2w"),
            0.25,
            ">=",
            "x",
        ),
        (
            f"prefetch {sizes.prefetch} >= 0.9x prefetch 0 (1 worker)",
            pr("ours", "prefetch_1w", "ours", "process_1w"),
            0.9,
            ">=",
            "x",
        ),
        (
            "single enqueue >= 0.9x raw INSERT+NOTIFY",
            pr("ours", "enqueue_single", "raw1", "enqueue_single"),
            0.9,
            ">=",
            "x",
        ),
        ("bulk enqueue >= 0.7x raw COPY", pr("ours", "enqueue_bulk", "raw1", "enqueue_bulk"), 0.7, ">=", "x"),
        (
            f"{sizes.depth_rows:,} done rows + pruning >= 0.9x of an empty table",
            pr("ours", "depth_1m", "ours", "process_1w"),
            0.9,
            ">=",
            "x",
        ),
        (
            f"{sizes.backlog:,} queued >= 0.9x of {sizes.process:,} queued",
            pr("ours", "backlog", "ours", "process_1w"),
            0.9,
            ">=",
            "x",
        ),
        (
            f"RSS after {sizes.memory_jobs:,} jobs <= 1.1x after {sizes.memory_mark:,}",
            ours.get("memory"),
            1.1,
            "<=",
            "x",
        ),
        ("Redis: processing >= 1x arq", pr("ours", "redis_1w", "arq", "redis_1w"), 1.0, ">=", "x"),
        ("SQLite >= 9,000 jobs/s", ours.get("sqlite"), 9000.0, ">=", "jobs/s"),
        ("pickup latency p50 <= 3 ms", ours.get("latency_p50"), 3.0, "<=", "ms"),
        ("pickup latency p95 <= 6 ms", ours.get("latency_p95"), 6.0, "<=", "ms"),
        ("idle SIGTERM to exit <= 100 ms", ours.get("sigterm"), 100.0, "<=", "ms"),
    ]
    for key, what in (
        ("process_1w", "processing, 1 worker"),
        ("process_2w", "processing, 2 workers"),
        ("sqlite", "SQLite processing"),
        ("redis_1w", "Redis processing"),
    ):
        checks.append((f"info: ours-speed / ours, {what}", pr("ours-speed", key, "ours", key), None, "info", "x"))
    checks.append(
        (
            "info: ours-speed / ours, pickup latency p50",
            pr("ours-speed", "latency_p50", "ours", "latency_p50", "p50_ms"),
            None,
            "info",
            "x",
        )
    )
    out = []
    for name, measured, bound, op, unit in checks:
        passed = None
        if measured is not None and bound is not None:
            passed = measured >= bound if op == ">=" else measured <= bound
        out.append({"target": name, "measured": measured, "bound": bound, "op": op, "unit": unit, "passed": passed})
    return out


# -- output ---------------------------------------------------------------------


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value:.1f}" if value < 100 else f"{value:,.0f}"
    if unit == "MiB":
        return f"{value:.0f}"
    if unit == "x":
        return f"{value:.3f}"
    return f"{value:,.0f}"


def render_table(
    rows: list[tuple[str, str, str]],
    summary: dict[str, dict[str, float | None]],
    flags: dict[str, dict[str, str]],
    labels: list[str],
) -> str:
    head = ["metric", "unit", *labels]
    body = []
    for key, title, unit in rows:
        cells = []
        for label in labels:
            cell = fmt(summary.get(label, {}).get(key), unit)
            cells.append(cell + flags.get(label, {}).get(key, ""))
        body.append([title, unit, *cells])
    widths = [max(len(str(r[i])) for r in [head, *body]) for i in range(len(head))]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in body:
        lines.append(
            "| "
            + " | ".join((c.ljust(w) if i < 2 else c.rjust(w)) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            + " |"
        )
    return "\n".join(lines)


def render_targets(targets: list[dict[str, Any]]) -> str:
    lines = ["| target | measured | verdict |", "|---|---|---|"]
    for t in targets:
        value = t["measured"]
        unit = t.get("unit", "")
        if value is None:
            measured = "-"
        elif unit == "x":
            measured = f"{value:.2f}x"
        elif unit == "ms":
            measured = f"{value:.1f} ms"
        else:
            measured = f"{value:,.0f} {unit}".rstrip()
        verdict = {None: "n/a", True: "PASS", False: "FAIL"}[t["passed"]]
        if t["op"] == "info":
            verdict = "info"
        lines.append(f"| {t['target']} | {measured} | {verdict} |")
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    def sh(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    pg = ""
    if venv_python("raw").exists():
        pg = sh(
            str(venv_python("raw")),
            "-c",
            "import asyncio,asyncpg\n"
            "async def m():\n c=await asyncpg.connect('postgresql://postgres@127.0.0.1:5432/postgres')\n"
            " print(await c.fetchval('select version()'));\n"
            " print(await c.fetchval('show synchronous_commit')); await c.close()\n"
            "asyncio.run(m())",
        )
    pg_lines = pg.splitlines() or ["", ""]
    return {
        "nproc": sh("nproc"),
        "memory": sh("free", "-h"),
        "cpu": next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            "",
        )
        if Path("/proc/cpuinfo").exists()
        else "",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgres": pg_lines[0],
        "synchronous_commit": pg_lines[1] if len(pg_lines) > 1 else "",
        "git_commit": sh("git", "-C", str(REPO), "rev-parse", "--short", "HEAD"),
    }


# -- the plan ---------------------------------------------------------------------

# Rough seconds per driver call in a full run on the 2-core machine (start-up, fill, the
# measurement, the stop), for the estimate printed before a run. Columns not listed here
# take the metric's "*" figure.
GUESS_SECONDS: dict[str, dict[str, float]] = {
    "enqueue_single": {"*": 3, "soniq010": 6, "procrastinate": 6},
    "enqueue_bulk": {"*": 1},
    "process_1w": {"*": 3, "soniq010": 9, "procrastinate": 15, "raw1": 4},
    "process_2w": {"*": 3, "soniq010": 9, "procrastinate": 13, "raw1": 3},
    "prefetch_1w": {"*": 3},
    "backlog": {"*": 4, "soniq010": 155, "pgqueuer": 31, "procrastinate": 17, "raw1": 7},
    # the first call also builds the template (about 45 s); later ones copy it
    "depth_1m": {"*": 25},
    "memory": {"*": 40},
    "redis_1w": {"*": 5, "arq": 27},
    "latency_p50": {"*": 6},
    "sigterm": {"*": 2},
    "sqlite": {"*": 2, "soniq010": 42},
}
SCALES_WITH_PROCESS = ("process_1w", "process_2w", "prefetch_1w", "backlog", "redis_1w", "sqlite")


def estimate_seconds(plan: list[tuple[Metric, Column]], sizes: Sizes) -> float:
    """Seconds one repetition of `plan` takes, roughly (the runner's own overhead included)."""
    total = 0.0
    for metric, column in plan:
        guesses = GUESS_SECONDS.get(metric.key, {"*": 5})
        seconds = guesses.get(column.label, guesses["*"])
        if metric.key in SCALES_WITH_PROCESS:
            seconds = 1 + (seconds - 1) * sizes.process / FULL.process
        elif metric.key == "memory":
            seconds *= sizes.memory_jobs / FULL.memory_jobs
        total += seconds + 0.5
    return total


def measure(
    runs: int,
    metrics: list[Metric],
    columns: list[Column],
    sizes: Sizes,
    raw: dict[str, dict[str, list[dict[str, Any]]]],
    fingerprints: set[str],
) -> None:
    """Every (metric, column) once per repetition, repetitions one after another; results into `raw`."""
    for rep in range(runs):
        for metric in metrics:
            for column in columns:
                if not runs_on(column, metric):
                    continue
                print(f"[run {rep + 1}/{runs}] {metric.key:<15} {column.label:<14}", end=" ", flush=True)
                result = call_driver(column, metric.args, timeout=sizes.timeout * 2 + 300)
                if column.driver == "ours_driver.py":
                    result["source"] = source_fingerprint()
                    fingerprints.add(result["source"])
                raw[column.label].setdefault(metric.key, []).append(result)
                value = result.get(metric.field)
                shown = result.get("error") or (
                    f"{value:,.3f} {metric.unit}"
                    if metric.unit == "x" and isinstance(value, (int, float))
                    else f"{value:,.1f} {metric.unit}"
                    if isinstance(value, (int, float))
                    else "-"
                )
                flag = " (timed out: partial)" if result.get("timed_out") else ""
                print(f"{shown}{flag}  [{result.get('wall_s', '?')}s]", flush=True)


def source_version() -> dict[str, Any]:
    """The commit measured, and whether ours' packages or the harness differed from it."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    paths = [str(REPO / "packages" / p) for p in OURS_PACKAGES] + [str(BENCH)]
    changed = git("status", "--porcelain", "--untracked-files=no", "--", *paths)
    return {
        "git_commit": git("rev-parse", "HEAD"),
        "git_describe": git("log", "-1", "--format=%h %s"),
        "uncommitted_changes": changed.splitlines(),
    }


# -- main -----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 run, smaller N: a few minutes")
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated systems ({', '.join(SYSTEMS)}) or columns ({', '.join(c.label for c in COLUMNS)})",
    )
    parser.add_argument(
        "--metrics",
        default=None,
        help=f"comma-separated metric keys (default: all): {', '.join(m.key for m in metrics_for(FULL))}",
    )
    parser.add_argument("--runs", type=int, default=None, help="repetitions (default: 3, quick: 1)")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--reinstall", action="store_true", help="recreate the venvs")
    parser.add_argument(
        "--rerender",
        default=None,
        metavar="JSON",
        help="measure nothing: rebuild the table and targets of a results file",
    )
    args = parser.parse_args(argv)
    previous: dict[str, Any] | None = None
    if args.rerender:
        previous = json.loads(Path(args.rerender).read_text())
        args.quick = previous["mode"] == "quick"
        args.runs = previous["runs"]

    sizes = QUICK if args.quick else FULL
    if previous is not None:
        sizes = Sizes(**previous["sizes"])
    runs = args.runs or sizes.runs
    only = [s.strip() for s in args.only.split(",")] if args.only else list(SYSTEMS)
    labels_known = {c.label for c in COLUMNS}
    unknown = sorted(set(only) - set(SYSTEMS) - labels_known)
    if unknown:
        parser.error(
            f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(SYSTEMS)} "
            f"or the columns {', '.join(c.label for c in COLUMNS)}"
        )
    columns = [c for c in COLUMNS if c.env_name in only or c.label in only]
    if previous is not None:
        columns = [c for c in COLUMNS if c.label in previous["raw"]]
    metrics = metrics_for(sizes)
    if args.metrics:
        keys = {k.strip() for k in args.metrics.split(",")}
        unknown = sorted(keys - {m.key for m in metrics})
        if unknown:
            parser.error(f"unknown metric(s) {', '.join(unknown)}; choose from {', '.join(m.key for m in metrics)}")
        metrics = [m for m in metrics if m.key in keys]
    columns = [c for c in columns if previous is not None or any(runs_on(c, m) for m in metrics)]

    ENVS.mkdir(exist_ok=True)
    RESULTS.mkdir(exist_ok=True)
    if previous is None:
        shutil.rmtree(LOG_DIR, ignore_errors=True)
        for name in dict.fromkeys([*(c.env_name for c in columns), "raw"]):
            ensure_env(name, reinstall=args.reinstall)
        plan = [(m, c) for m in metrics for c in columns if runs_on(c, m)]
        estimate = estimate_seconds(plan, sizes) * runs
        print(
            f"[plan] {len(plan) * runs} measurements ({runs} interleaved repetitions of {len(plan)}); "
            f"estimated {estimate / 60:.0f} min",
            flush=True,
        )
    # Names this session's one-off fixtures (the depth metric's template database).
    os.environ["BENCH_RUN_ID"] = f"{os.getpid()}-{time.time_ns()}"

    started = time.time()
    load_before = os.getloadavg()
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {c.label: {} for c in columns}
    fingerprints: set[str] = set()
    if previous is not None:
        raw = previous["raw"]
        fingerprints = set(previous.get("ours_sources", []))
        load_before = tuple(previous["load_average_before"])
    try:
        measure(runs if previous is None else 0, metrics, columns, sizes, raw, fingerprints)
    finally:
        if previous is None and any(m.key == "depth_1m" for m in metrics):
            ours = next((c for c in COLUMNS if c.label == "ours"), None)
            if ours is not None and ours in columns:
                call_driver(ours, ["drop-template"], timeout=120)

    summary: dict[str, dict[str, float | None]] = {}
    flags: dict[str, dict[str, str]] = {}
    for column in columns:
        summary[column.label] = {}
        flags[column.label] = {}
        for metric in metrics:
            values = raw[column.label].get(metric.key, [])
            if values:
                summary[column.label][metric.key] = median_of(values, metric.field)
                if any(v.get("timed_out") for v in values):
                    flags[column.label][metric.key] = "*"
                if any("error" in v for v in values):
                    flags[column.label][metric.key] = "!"
        for key, _title, source, fieldname, _unit in DERIVED:
            if raw[column.label].get(source):
                summary[column.label][key] = median_of(raw[column.label][source], fieldname)

    rows = []
    for metric in metrics:
        rows.append((metric.key, metric.title, metric.unit))
        for key, title, source, _f, unit in DERIVED:
            if source == metric.key:
                rows.append((key, title, unit))
    labels = [c.label for c in columns]
    table = render_table(rows, summary, flags, labels)
    targets = evaluate_targets(summary, raw, sizes)
    load_after = os.getloadavg() if previous is None else tuple(previous["load_average_after"])
    machine = machine_info() if previous is None else previous["machine"]
    seconds = time.time() - started if previous is None else previous["seconds"]
    finished = dt.datetime.now(dt.UTC) if previous is None else dt.datetime.fromisoformat(previous["finished_at"])

    print()
    print(
        f"soniq benchmark ({'quick' if args.quick else 'full'}, medians of {runs}), "
        f"{finished:%Y-%m-%d %H:%M} UTC, {seconds:.0f}s"
    )
    print(
        f"machine: {machine['nproc']} cores, {machine['cpu']}; {machine['postgres'][:40]}; "
        f"load avg before {load_before[0]:.2f}, after {load_after[0]:.2f}"
    )
    print()
    print(table)
    print("\n* = hit the time limit (partial rate)   ! = a run failed (see JSON)\n")
    print(render_targets(targets))
    if len(fingerprints) > 1:
        print(
            f"\nwarning: ours' sources changed during the session ({len(fingerprints)} versions measured; "
            "the 'source' field of each result in the JSON says which)"
        )

    version = source_version() if previous is None else previous.get("source_version", {})
    if version.get("git_commit"):
        dirty = " (+ uncommitted changes)" if version.get("uncommitted_changes") else ""
        print(f"\nsource: {version['git_commit']}{dirty}")
    report = {
        "mode": "quick" if args.quick else "full",
        "source_version": version,
        "runs": runs,
        "sizes": sizes.__dict__,
        "finished_at": finished.isoformat(timespec="seconds"),
        "seconds": round(seconds, 1),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "machine": machine,
        "ours_sources": sorted(fingerprints),
        "versions": previous["versions"]
        if previous is not None
        else {name: installed_versions(name) for name in dict.fromkeys(c.env_name for c in columns)},
        "ratio_method": "median over repetitions of the paired (same repetition) ratio",
        "summary": summary,
        "targets": targets,
        "table": table,
        "raw": raw,
    }
    full_run = not args.quick and not args.only and not args.metrics
    outputs = [RESULTS / ("last.json" if full_run else f"run-{dt.datetime.now():%Y%m%d-%H%M%S}.json")]
    if previous is not None:
        outputs = [Path(args.rerender)]
    if args.json:
        outputs.append(Path(args.json))
    for path in outputs:
        path.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
