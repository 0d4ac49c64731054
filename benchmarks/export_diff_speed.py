"""How long `harness diff A B` of two exports takes, cold, against `harness kernels` on each of them.

The target (issue 25): the diff of two captures, cold, takes no longer than `harness kernels` on both files
plus 2 s. A is the 2-GPU torchrun capture (../shared/fixtures/nsys/ext/torchrun_2gpu: 4,010 kernels, 19,118
NVTX ranges, 7,466 CUDA calls); B is a copy of it with every kernel 20% longer (the pair of
tests/test_export_diff.py). Each command runs in a fresh process with `--no-cache` and a fresh, empty
HARNESS_CACHE_DIR, in turns (kernels A, kernels B, diff), `--repeat` times; reported are the median wall time
and the median CPU time (user + system of the child) of each, and the verdict against the target in both.
CPU time is given because the wall time of a shared machine follows its load.

    .venv/bin/python benchmarks/export_diff_speed.py [--repeat 5] [--a EXPORT --b EXPORT]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO.parent / "shared" / "fixtures" / "nsys" / "ext" / "torchrun_2gpu" / "report.sqlite"
T0 = "(SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_KERNEL)"
LONGER = (
    f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = {T0} + (start - {T0}) * 6 / 5, "
    f"end = {T0} + (end - {T0}) * 6 / 5"
)


def derived(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    with sqlite3.connect(dst) as con:
        con.execute(LONGER)
    return dst


def timed(args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of `python -m harness ARGS` in a fresh process with an empty cache folder."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"}
    with tempfile.TemporaryDirectory() as cache:
        env["HARNESS_CACHE_DIR"] = cache
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "harness", *args], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode not in (0, 1):
        raise SystemExit(f"harness {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--a", type=Path, default=FIXTURE)
    ap.add_argument("--b", type=Path, default=None, help="default: A with every kernel 20%% longer")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        b = args.b or derived(args.a, Path(tmp) / "b.sqlite")
        runs: dict[str, list[tuple[float, float]]] = {"kernels A": [], "kernels B": [], "diff A B": []}
        for _ in range(args.repeat):
            runs["kernels A"].append(timed(["kernels", str(args.a), "--no-cache"]))
            runs["kernels B"].append(timed(["kernels", str(b), "--no-cache"]))
            runs["diff A B"].append(timed(["diff", str(args.a), str(b), "--no-cache"]))
    med = {
        k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()
    }
    print(f"{'command':<12} {'wall (s)':>9} {'CPU (s)':>8}   (median of {args.repeat}, cold, fresh process)")
    for k, (w, c) in med.items():
        print(f"{k:<12} {w:9.2f} {c:8.2f}")
    for i, what in enumerate(("wall", "CPU")):
        budget = med["kernels A"][i] + med["kernels B"][i] + 2
        took = med["diff A B"][i]
        verdict = "met" if took <= budget else "MISSED"
        print(
            f"target ({what}): diff {took:.2f} s <= kernels A + kernels B + 2 s = {budget:.2f} s: {verdict}"
        )


if __name__ == "__main__":
    main()
