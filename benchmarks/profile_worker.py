"""Sample one `soniq worker` with py-spy while it processes N no-op jobs; summarise where the time goes.

    flock /tmp/soniq-bench.lock python3 benchmarks/profile_worker.py --jobs 20000 --out /tmp/before.txt
    ... [--env ours-speed] [--sqlite] [--raw /tmp/stacks.txt] [--top 25] [--rate 250]

Runs with any Python: it re-executes itself in the benchmark venv named by
`--env` (`ours`, default, or `ours-speed` with uvloop and orjson; create
them with one `benchmarks/run.py` run, which also installs py-spy there).

The worker (`soniq worker --concurrency 10`, as in run.py's process_1w)
starts idle on a fresh PostgreSQL database (`--sqlite`: SQLite); py-spy
attaches; the jobs are enqueued in bulk; sampling stops when all are done.
The text flame summary (the functions with the most samples, by own time and
by inclusive time, as shares of the busy samples, with idle in the event
loop's `select` counted apart) is printed and, with `--out`, written to that
file with a header naming the commit and the run. The collapsed stacks
(py-spy's raw format, the input of any flame-graph tool) go to `--raw`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH / "drivers"))


def frame_name(frame: str) -> str:
    # py-spy raw frames look like "function (path/to/file.py:123)"
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/src/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})"


IDLE_LEAVES = (".select (selectors.py)", "select (")
# Under uvloop the loop itself is C: a sample whose innermost Python frame is the one that
# started the loop is idle in epoll or in uvloop's own I/O work (py-spy cannot tell which
# without --native), so it is counted apart rather than as that frame's own time.
NATIVE_LOOP_LEAVES = ("Runner.run (asyncio/runners.py)", "run (uvloop/__init__.py)", "run_until_complete (")


def summarise(path: Path, top: int) -> list[str]:
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = idle = native_loop = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = [frame_name(f) for f in stack.split(";") if f and not f.startswith("process ")]
        if not frames:
            continue
        total += count
        leaf = frames[-1]
        if leaf.endswith(IDLE_LEAVES[0]) or leaf.startswith(IDLE_LEAVES[1:]):
            idle += count
            continue
        if leaf.startswith(NATIVE_LOOP_LEAVES):
            native_loop += count
            continue
        own[leaf] += count
        for name in set(frames):
            inclusive[name] += count
    busy = max(1, total - idle - native_loop)
    share = 100 / max(1, total)
    lines = [f"{total} samples: {idle} idle in the event loop's select ({idle * share:.0f}%)"]
    if native_loop:
        lines.append(f"  {native_loop} in uvloop's native loop, idle or its own I/O ({native_loop * share:.0f}%)")
    lines.append(f"  {busy} busy in Python code ({busy * share:.0f}%)")
    lines += ["", "own time (% of busy samples):"]
    lines += [f"  {100 * count / busy:5.1f}%  {name}" for name, count in own.most_common(top)]
    lines += ["", "inclusive time (% of busy samples):"]
    lines += [f"  {100 * count / busy:5.1f}%  {name}" for name, count in inclusive.most_common(top)]
    return lines


def git_head() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(BENCH.parent), "log", "-1", "--format=%h %s"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def loop_and_codec() -> str:
    found = []
    for module in ("uvloop", "orjson"):
        try:
            __import__(module)
            found.append(module)
        except ImportError:
            pass
    return ", ".join(found) or "neither uvloop nor orjson installed"


async def run(args: argparse.Namespace) -> None:
    from _harness import LOG_DIR
    from ours_driver import OursDriver

    jobs, sqlite, rate, top = args.jobs, args.sqlite, args.rate, args.top
    raw_out = Path(args.raw)
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if py_spy is None:
        raise SystemExit(f"py-spy is not installed: {Path(sys.executable).parent}/pip install py-spy")
    driver = OursDriver()
    url = await driver.fresh(sqlite=sqlite)
    worker = driver.spawn_worker(url, 10)
    await asyncio.sleep(2.0)  # started and idle
    raw_out.unlink(missing_ok=True)
    sampler = subprocess.Popen(
        [
            py_spy,
            "record",
            "--pid",
            str(worker.pid),
            "--rate",
            str(rate),
            "--format",
            "raw",
            "-o",
            str(raw_out),
            "--duration",
            "120",
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    await asyncio.sleep(1.0)
    began = time.monotonic()
    await driver.fill(url, jobs)
    samples = await driver.poll_until(url, jobs, jobs, time.monotonic() + 120, [worker])
    elapsed = time.monotonic() - began
    sampler.send_signal(2)  # SIGINT: py-spy writes what it has
    sampler.wait(timeout=30)
    driver.stop_workers([worker])
    done = samples[-1][1] if samples else 0
    header = [
        f"soniq worker profile, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, commit {git_head()}",
        f"store {'SQLite' if sqlite else 'PostgreSQL'}, concurrency 10, venv {Path(sys.prefix).name} "
        f"({loop_and_codec()}), Python {platform.python_version()}, py-spy {rate} Hz",
        f"{done:,} of {jobs:,} no-op jobs in {elapsed:.2f}s including the enqueue "
        f"({done / elapsed:,.0f} jobs/s while sampled; py-spy slows the worker a little)",
    ]
    print("\n".join(header))
    print(f"worker log: {LOG_DIR}; collapsed stacks: {raw_out}")
    if not raw_out.exists():
        raise SystemExit("py-spy wrote no output (is ptrace allowed? see /proc/sys/kernel/yama/ptrace_scope)")
    text = "\n".join([*header, "", *summarise(raw_out, top)]) + "\n"
    print()
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
        print(f"\nwrote {args.out}")


def reexec_in_venv(env: str) -> None:
    """Run this script with the benchmark venv's Python, unless that is already the one running."""
    python = BENCH / ".envs" / env / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"no venv {python.parent.parent}: run benchmarks/run.py once (it creates the venvs)")
    if Path(sys.prefix).resolve() != python.parent.parent.resolve():
        os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--sqlite", action="store_true")
    parser.add_argument("--env", default="ours", choices=("ours", "ours-speed"), help="benchmark venv to run in")
    parser.add_argument("--out", default=None, help="write the text summary here")
    parser.add_argument("--raw", default="/tmp/soniq-worker-profile.txt", help="py-spy's collapsed stacks")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    reexec_in_venv(args.env)
    os.environ.setdefault("SONIQ_OBSERVERS", "")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
