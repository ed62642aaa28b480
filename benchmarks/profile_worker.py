"""Sample one `soniq worker` with py-spy while it processes N no-op jobs; print where the time goes.

    benchmarks/.envs/ours/bin/pip install py-spy        # once
    benchmarks/.envs/ours/bin/python benchmarks/profile_worker.py [--jobs 20000] [--sqlite]

The worker starts idle on a fresh database; py-spy attaches; the jobs are
enqueued in one bulk call; sampling stops when all are done. Prints the
functions with the most samples, by own time and by inclusive time, with
idle (the event loop's `select`) shown separately. The collapsed stacks are
kept in /tmp/soniq-worker-profile.txt for a flame graph.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "drivers"))

from _harness import LOG_DIR
from ours_driver import OursDriver

OUT = Path("/tmp/soniq-worker-profile.txt")


def frame_name(frame: str) -> str:
    # py-spy raw frames look like "function (path/to/file.py:123)"
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/src/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})"


def summarise(path: Path, top: int) -> None:
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = idle = 0
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
        if leaf.endswith(".select (selectors.py)") or leaf.startswith("select ("):
            idle += count
            continue
        own[leaf] += count
        for name in set(frames):
            inclusive[name] += count
    busy = max(1, total - idle)
    print(f"\n{total} samples, {idle} idle in select ({100 * idle / max(1, total):.0f}%), {busy} busy")
    print("\nown time (% of busy samples):")
    for name, count in own.most_common(top):
        print(f"  {100 * count / busy:5.1f}%  {name}")
    print("\ninclusive time (% of busy samples):")
    for name, count in inclusive.most_common(top):
        print(f"  {100 * count / busy:5.1f}%  {name}")


async def run(jobs: int, sqlite: bool, rate: int, top: int) -> None:
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if py_spy is None:
        raise SystemExit(f"py-spy is not installed: {Path(sys.executable).parent}/pip install py-spy")
    driver = OursDriver()
    url = await driver.fresh(sqlite=sqlite)
    worker = driver.spawn_worker(url, 10)
    await asyncio.sleep(2.0)  # started and idle
    OUT.unlink(missing_ok=True)
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
            str(OUT),
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
    print(f"{done} of {jobs} jobs in {elapsed:.2f}s including the enqueue ({done / elapsed:,.0f} jobs/s while sampled)")
    print(f"worker log: {LOG_DIR}")
    if OUT.exists():
        summarise(OUT, top)
    else:
        print("py-spy wrote no output (is ptrace allowed?)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--sqlite", action="store_true")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    os.environ.setdefault("SONIQ_OBSERVERS", "")
    asyncio.run(run(args.jobs, args.sqlite, args.rate, args.top))


if __name__ == "__main__":
    main()
