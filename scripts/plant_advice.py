"""Advice's record on the catalogue of planted causes: each cause run on the CPU under a profiler, then
`harness advise RUN`; one markdown row per cause and profiler (docs/advice.md keeps the table).

    python scripts/plant_advice.py [--profiler nsys|torch ...] [--cause CAUSE ...] [--model char]

Each run is `harness run MODEL --device cpu --steps 3 --warmup 1 --plant CAUSE` with `--nsys
--no-nsys-baseline` or `--profiler torch`, in a folder and database of its own, torch on one thread
(OMP_NUM_THREADS=1 unless set: on a loaded machine its thread pool waits for cores). A row says whether the
catalogue's rule came first, what else fired (with its time at stake, and its share of the measured
steps' time), and the largest stake of a rule other than the cause's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from harness.execution.nsys.find import find_nsys
from harness.store.results import ResultsStore
from workloads.plants import catalogue as plants

PROFILERS = {"nsys": ["--nsys", "--no-nsys-baseline"], "torch": ["--profiler", "torch"]}


def advised(model: str, profiler: str, cause: str) -> tuple[list[dict], int]:
    """The findings of the cause's run and its measured steps' time (ns)."""
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "HARNESS_DB": f"sqlite:///{folder}/results.sqlite"}
        env.setdefault("HARNESS_NSYS", str(find_nsys().path))
        env.setdefault("OMP_NUM_THREADS", "1")  # as the tests: a loaded machine's cores swamp the causes
        run = [sys.executable, "-m", "harness", "run", model, "--device", "cpu", "--steps", "3"]
        run += ["--warmup", "1", *PROFILERS[profiler], "--plant", cause]
        subprocess.run(run, cwd=folder, env=env, check=True, capture_output=True)
        store = ResultsStore(env["HARNESS_DB"])
        (run_id,) = store.runs()["run_id"]
        said = subprocess.run(
            [sys.executable, "-m", "harness", "advise", run_id, "--format", "json"],
            cwd=folder, env=env, check=True, capture_output=True, text=True,
        )  # fmt: skip
        timers = store.step_timings([run_id])
        step_ns = int(timers.loc[~timers["warmup"].astype(bool), "duration_ns"].sum())
        return json.loads(said.stdout)["findings"], step_ns


def row(profiler: str, cause: str, found: list[dict], step_ns: int) -> str:
    want = plants.CAUSES[cause].rule
    first = found[0]["Rule"] if found else "—"
    verdict = "n/a" if want is None else ("yes" if first == want else "no")
    stakes = [(f["Rule"], f["Time at stake (ns)"]) for f in found]
    fired = ", ".join(f"{r} {ns / 1e6:.1f} ms ({100 * ns / step_ns:.0f} %)" for r, ns in stakes)
    return f"| {cause} | {profiler} | {want or 'none'} | {verdict} | {fired or 'nothing'} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiler", action="append", choices=list(PROFILERS))
    parser.add_argument("--cause", action="append", choices=[c for c in plants.NAMES if c != "fp32-matmul"])
    parser.add_argument("--model", default="char")
    args = parser.parse_args()
    causes = args.cause or [c for c, k in plants.CAUSES.items() if k.cpu != plants.REFUSED]
    print("| cause | profiler | rule | first | fired (time at stake, share of the steps) |")
    print("|---|---|---|---|---|")
    for profiler in args.profiler or list(PROFILERS):
        for cause in causes:
            found, step_ns = advised(args.model, profiler, cause)
            print(row(profiler, cause, found, step_ns), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
