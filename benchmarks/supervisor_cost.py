"""What surviving faults costs: the supervisor's start-up per child process, and the worker's per-step log.

Every worker and every nsys runs under `python -m harness.execution.supervisor`, and the worker appends each
finished step to a log (harness/execution/worker.py) so kill -9 loses nothing. Start-up is measured on a
child that does nothing, direct and supervised, alternating (ABBA) so the machine's drift hits both; the log
as the worker writes it, between steps (outside every timed phase).

    .venv/bin/python benchmarks/supervisor_cost.py [--rounds 20] [--steps 2000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from harness.core.records import StepRecord
from harness.execution import supervisor

NOTHING = [sys.executable, "-c", "pass"]


def direct() -> None:
    subprocess.run(NOTHING, check=True, capture_output=True)


def supervised() -> None:
    assert supervisor.run(NOTHING).returncode == 0


def start_up_ms(rounds: int) -> tuple[float, float]:
    times: dict[str, list[float]] = {"direct": [], "supervised": []}
    for i in range(rounds):
        order = [("direct", direct), ("supervised", supervised)]
        for label, fn in order if i % 2 == 0 else order[::-1]:
            began = time.perf_counter()
            fn()
            times[label].append((time.perf_counter() - began) * 1e3)
    return statistics.median(times["direct"]), statistics.median(times["supervised"])


def step_log_us(steps: int) -> float:
    step = StepRecord(step=123, warmup=False, phases={"forward": 1, "backward": 2, "optimizer": 3})
    with tempfile.TemporaryDirectory() as tmp, (Path(tmp) / "steps.jsonl").open("w") as log:
        costs = []
        for _ in range(steps):
            began = time.perf_counter_ns()
            log.write(json.dumps(asdict(step)) + "\n")
            log.flush()
            costs.append(time.perf_counter_ns() - began)
    return statistics.median(costs) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    plain, watched = start_up_ms(args.rounds)
    print(f"child start-up, median of {args.rounds}: direct {plain:.1f} ms, supervised {watched:.1f} ms, ")
    print(f"  supervisor adds {watched - plain:.1f} ms per child (once per run, not per step)")
    print(f"worker step log, median of {args.steps}: {step_log_us(args.steps):.1f} µs per step")


if __name__ == "__main__":
    main()
