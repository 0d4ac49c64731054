"""Records the A/A step times tests/test_aa.py reads: one configuration run again and again, each run in
a fresh process, one after the other, as `harness run char --device cpu --repeats N` runs them.

    OMP_NUM_THREADS=1 .venv/bin/python tests/data/aa/record.py [--runs 46] [--out tests/data/aa/char-cpu.csv]

The CSV holds, in the order the runs were made: run (0, 1, …), step, phase, duration_ns (measured steps
only). One torch thread (OMP_NUM_THREADS=1): on a machine shared with other work, two threads a run wait
on each other's slices and the steps scatter more.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
from pathlib import Path

from harness.core.records import RunConfig
from harness.experiments.drift import repeat_runs
from harness.store.results import ResultsStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=46)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("char-cpu.csv"))
    args = parser.parse_args()
    config = RunConfig(model="char", device="cpu", warmup=2, steps=args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        store = ResultsStore(f"sqlite:///{tmp}/results.sqlite")
        done = repeat_runs(config, args.runs, store, progress=print)
    with args.out.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["run", "step", "phase", "duration_ns"])
        for i, result in enumerate(done.results):
            for s in result.steps:
                if not s.warmup:
                    out.writerows((i, s.step, phase, ns) for phase, ns in s.phases.items())
    print(f"{len(done.results)} runs ({done.results[0].device_name}) -> {args.out}")


if __name__ == "__main__":
    main()
