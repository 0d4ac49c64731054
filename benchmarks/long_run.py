"""What a long run costs the commands that read its steps: `median_rank(N)` (analysis.runs.steady, the
median's interval) alone, and `harness import` then `harness show` of a generated N-step train run
(harness-unsaved-*.json, three phases a step, as `harness run` writes it) into a fresh database.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/long_run.py --steps 100000

Prints a small Markdown table: wall and CPU seconds of each (the commands as processes, start-up included;
on a shared machine the CPU seconds are the steadier figure).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from analysis.runs.steady import median_rank
from harness.core.records import ModelInfo, RunConfig, RunResult, StepRecord
from harness.store import unsaved


def long_run(steps: int, folder: Path, warmup: int = 2) -> Path:
    """A train run of `steps` measured steps (and `warmup` before), written as `run` writes an unsaved one."""
    rng = random.Random(0)
    phases = {"forward": 10_000_000, "backward": 20_000_000, "optimizer": 5_000_000}
    records = [
        StepRecord(i, i < warmup, {p: int(ns * (1 + 0.05 * rng.random())) for p, ns in phases.items()})
        for i in range(steps + warmup)
    ]
    result = RunResult(
        run_id=f"long-{steps}",
        config=RunConfig(model="tiny", warmup=warmup, steps=steps),
        status="ok",
        device="cpu",
        model=ModelInfo("transformer", 64, 256, 2, 2, 1000, 64, 100_000),
        steps=records,
    )
    pending = unsaved.PendingRun(result=result, created_at=datetime.now(UTC))
    return unsaved.write(pending, [folder], "benchmark")


def timed_command(*args: str) -> tuple[float, float]:
    """Wall and CPU seconds of `harness ARGS` (the CPU's: what a machine shared with others still shows)."""
    before, start = os.times(), time.perf_counter()
    subprocess.run([sys.executable, "-m", "harness", *args], check=True, capture_output=True)
    wall, after = time.perf_counter() - start, os.times()
    cpu = after.children_user + after.children_system - before.children_user - before.children_system
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    start = time.perf_counter()
    k = median_rank(args.steps)
    rank_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = long_run(args.steps, folder)
        db = str(folder / "results.sqlite")
        import_s = timed_command("import", str(path), "--db", db)
        show_s = timed_command("show", f"long-{args.steps}", "--db", db, "-f", "csv")
        size = path.stat().st_size
    print(f"| what ({args.steps:,} steps) | wall (s) | CPU (s) |\n|---|---|---|")
    print(f"| median_rank({args.steps}) = {k} | {rank_s:.4f} | |")
    print(f"| harness import ({size / 1e6:.1f} MB file) | {import_s[0]:.2f} | {import_s[1]:.2f} |")
    print(f"| harness show | {show_s[0]:.2f} | {show_s[1]:.2f} |")


if __name__ == "__main__":
    main()
