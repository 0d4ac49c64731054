"""`harness --help` start-up, two checkouts side by side: each run alternates between them, so machine load
falls on both alike. Prints wall and CPU time (the child's user + sys, less sensitive to load) per side.

    python benchmarks/help_start.py OTHER_CHECKOUT [RUNS]

runs OTHER_CHECKOUT/.venv/bin/harness (before) against this checkout's (after), from /tmp so that neither
finds the other's sources on sys.path.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def main(other: Path, runs: int) -> None:
    sides = {f"before ({other})": other / ".venv/bin/harness", f"after ({HERE})": HERE / ".venv/bin/harness"}
    wall: dict[str, list[float]] = {k: [] for k in sides}
    cpu: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(runs):
        for side, exe in sides.items():
            r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            subprocess.run([exe, "--help"], stdout=subprocess.DEVNULL, check=True, cwd="/tmp")
            t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            wall[side].append(t1 - t0)
            cpu[side].append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    for side in sides:
        print(
            f"{side}: wall min {min(wall[side]):.3f} s, median {statistics.median(wall[side]):.3f} s; "
            f"CPU min {min(cpu[side]):.3f} s, median {statistics.median(cpu[side]):.3f} s ({runs} runs)"
        )
    before, after = sides
    ratio = statistics.median(cpu[after]) / statistics.median(cpu[before])
    print(f"after/before, median CPU: {ratio:.3f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve(), int(sys.argv[2]) if len(sys.argv) > 2 else 20)
