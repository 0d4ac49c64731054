"""How fast the harness reads a big export, against `nsys stats` on the same file, in the same run.

Builds a >= 1,000,000-kernel export from the A100 fixture (benchmarks/make_big_export.py) in a temp dir, then
times, alternating and repeated, each pair of commands as child processes:

    harness kernels BIG --format csv                        vs  nsys stats -r gpukernsum -f csv BIG
    harness nvtx-gpu BIG --mode thread --kernels -f csv     vs  nsys stats -r nvtxkernsum -f csv BIG

It checks the tables are equal (nvtxkernsum: equal except Total Time, which nsys doubles because the
fixture records each launch call twice; the harness counts each once), and reports the median wall time,
the ratio and each side's peak RSS (ru_maxrss of the child and its waited-for children, from wait4).

    .venv/bin/python benchmarks/export_speed.py [--kernels 1000000] [--repeat 3] [--nsys PATH]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_big_export import make_big_export

REPO = Path(__file__).resolve().parents[1]
NSYS = REPO / ".tools" / "nsys" / "usr" / "lib" / "nsight-systems" / "bin" / "nsys"


@dataclass
class Timed:
    wall_s: float
    peak_mb: float
    stdout: str


def timed(argv: list[str]) -> Timed:
    """Run argv; wall time and peak RSS (MB) of the child, its stdout."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed with exit code {proc.returncode}")
    return Timed(wall, usage.ru_maxrss / 1024, text)


def csv_table(text: str) -> pd.DataFrame:
    """The CSV in a command's stdout (nsys stats prints a `Processing [...]` line first)."""
    lines = [line for line in text.splitlines() if not line.startswith("Processing [")]
    return pd.read_csv(io.StringIO("\n".join(lines)))


def harness_argv() -> list[str]:
    script = Path(sys.executable).parent / "harness"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "harness"]


def compare(name: str, ours: list[str], theirs: list[str], repeat: int, check) -> dict[str, object]:  # type: ignore[no-untyped-def]
    runs: dict[str, list[Timed]] = {"harness": [], "nsys": []}
    for _ in range(repeat):
        runs["harness"].append(timed(ours))
        runs["nsys"].append(timed(theirs))
    check(csv_table(runs["harness"][-1].stdout), csv_table(runs["nsys"][-1].stdout))
    h = statistics.median(r.wall_s for r in runs["harness"])
    n = statistics.median(r.wall_s for r in runs["nsys"])
    return {
        "report": name,
        "harness_s": round(h, 2),
        "nsys_s": round(n, 2),
        "speedup": round(n / h, 2),
        "harness_peak_mb": round(max(r.peak_mb for r in runs["harness"])),
        "nsys_peak_mb": round(max(r.peak_mb for r in runs["nsys"])),
    }


def same_kernels(ours: pd.DataFrame, theirs: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(ours, theirs)


def same_nvtx_kernels(ours: pd.DataFrame, theirs: pd.DataFrame) -> None:
    assert (theirs["Total Time (ns)"] == 2 * ours["Total Time (ns)"]).all(), "nsys should double the total"
    rest = [c for c in theirs.columns if c != "Total Time (ns)"]
    pd.testing.assert_frame_equal(ours[rest], theirs[rest])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--nsys", type=Path, default=Path(os.environ.get("HARNESS_NSYS", NSYS)))
    parser.add_argument("--only", choices=["kernels", "nvtx-gpu"], default=None)
    args = parser.parse_args(argv)
    if not args.nsys.is_file():
        raise SystemExit(f"nsys not found at {args.nsys}: `make setup` installs it, or pass --nsys")
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.sqlite"
        built = make_big_export(big, args.kernels)
        print(f"export: {built:,} kernels, {big.stat().st_size / 1e6:.0f} MB", flush=True)
        rows = []
        if args.only in (None, "kernels"):
            rows.append(
                compare(
                    "kernels vs gpukernsum",
                    [*harness_argv(), "kernels", str(big), "--format", "csv"],
                    [str(args.nsys), "stats", "-r", "gpukernsum", "-f", "csv", str(big)],
                    args.repeat,
                    same_kernels,
                )
            )
        if args.only in (None, "nvtx-gpu"):
            rows.append(
                compare(
                    "nvtx-gpu vs nvtxkernsum",
                    [
                        *harness_argv(),
                        "nvtx-gpu",
                        str(big),
                        "--mode",
                        "thread",
                        "--kernels",
                        "--format",
                        "csv",
                    ],
                    [str(args.nsys), "stats", "-r", "nvtxkernsum", "-f", "csv", str(big)],
                    args.repeat,
                    same_nvtx_kernels,
                )
            )
    print(pd.DataFrame(rows).to_string(index=False))
    print("results equal: yes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
