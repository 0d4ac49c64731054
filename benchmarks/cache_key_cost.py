"""What naming a cache entry costs (analysis.trace.cache): the key as it is (stat with inode and ctime,
sampled
digest), against hashing the whole file, next to a warm `harness kernels FILE` (which pays for the key once).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/cache_key_cost.py /work/bench-data/big.sqlite --repeat 5

Each figure is the median of `--repeat` runs (wall and CPU), with the file in the page cache (read once
first): what a second command on the same export pays. Prints a small Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from analysis.trace.cache import Cache
from analysis.trace.digests import content_digest, whole_digest


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def warm_kernels(path: Path, repeat: int) -> tuple[float, float]:
    """`harness kernels PATH -f csv` served from a fresh cache folder (filled by a first run)."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "HARNESS_CACHE_DIR": cache}
        command = [sys.executable, "-m", "harness", "kernels", str(path), "-f", "csv"]
        subprocess.run(command, env=env, check=True, capture_output=True)
        walls, cpus = [], []
        for _ in range(repeat):
            before = os.times()
            w = time.perf_counter()
            subprocess.run(command, env=env, check=True, capture_output=True)
            walls.append(time.perf_counter() - w)
            after = os.times()
            cpus.append(
                after.children_user + after.children_system - before.children_user - before.children_system
            )
        return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-command", action="store_true", help="leave out the warm `harness kernels`")
    args = parser.parse_args()
    path: Path = args.file
    size = path.stat().st_size
    whole_digest(path)  # into the page cache
    with tempfile.TemporaryDirectory() as cache:
        store = Cache(Path(cache))
        rows = [
            (
                "entry key (stat, inode, ctime, sampled digest)",
                timed(lambda: store.entry(path, "v"), args.repeat),
            ),
            ("sampled digest alone", timed(lambda: content_digest(path, size), args.repeat)),
            ("whole-file hash (BLAKE2b)", timed(lambda: whole_digest(path), args.repeat)),
        ]
    if not args.no_command:
        rows.append(("`harness kernels FILE -f csv` warm", warm_kernels(path, args.repeat)))
    print(f"{path.name}: {size / 1e6:,.0f} MB, median of {args.repeat}")
    print("| what | wall | CPU |")
    print("|---|---|---|")
    for what, (wall, cpu) in rows:
        print(f"| {what} | {wall * 1000:,.1f} ms | {cpu * 1000:,.1f} ms |")


if __name__ == "__main__":
    main()
