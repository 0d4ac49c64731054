"""How often does the overhead verdict cry wolf? False-positive rate and power of the interval method.

Simulated step series with a known truth: runs whose level drifts from run to run (run_sd) and steps that
scatter around their run's level (step_sd), some with heavy-tailed outlier steps. For each setting, many
pairs with no effect (how often is "increase" or "decrease" claimed? should be about 5%) and with a +10%
effect (how often is it found?). Two methods: `analysis.compare.overhead.compare_samples` (Welch on run
means, what
the harness uses) and a two-stage bootstrap (runs, then steps within runs), the first design, kept here to
show why it was dropped.

    .venv/bin/python benchmarks/overhead_calibration.py [--pairs 400]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from analysis.compare.overhead import compare_samples


def series(
    rng: np.random.Generator, runs: int, steps: int, run_sd: float, step_sd: float, tail: bool, effect: float
) -> pd.DataFrame:
    rows = []
    for r in range(runs):
        level = 100 * (1 + effect) + rng.normal(0, run_sd)
        for _ in range(steps):
            x = level + rng.normal(0, step_sd)
            if tail and rng.random() < 0.1:  # one step in ten stalls
                x += 10 * step_sd + abs(rng.normal(0, 10 * step_sd))
            rows.append((r, x))
    return pd.DataFrame(rows, columns=["run", "duration_ns"])


def bootstrap_outcome(a: pd.DataFrame, b: pd.DataFrame, rng: np.random.Generator, n: int = 1000) -> str:
    """Percentile interval of mean(b)/mean(a) − 1 from a two-stage (runs, then steps) bootstrap."""

    def means(df: pd.DataFrame) -> np.ndarray:
        groups = [g.to_numpy() for _, g in df.groupby("run")["duration_ns"]]
        out = np.empty(n)
        for i in range(n):
            picked = [groups[j] for j in rng.integers(0, len(groups), len(groups))]
            out[i] = np.concatenate([g[rng.integers(0, len(g), len(g))] for g in picked]).mean()
        return out

    low, high = np.percentile(means(b) / means(a) - 1, [2.5, 97.5])
    return "increase" if low > 0 else "decrease" if high < 0 else "inconclusive"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    print(f"{args.pairs} pairs per row, {args.steps} steps per run; Welch = the harness, boot = bootstrap")
    print(f"{'runs':>4} {'run_sd':>6} {'step_sd':>7} {'tail':>5}  {'false +':>14}  {'power (+10%)':>14}")
    print(f"{'':>26}  {'Welch':>6} {'boot':>7}  {'Welch':>6} {'boot':>7}")
    for runs in (1, 2, 3, 5):
        for run_sd, step_sd, tail in ((0, 5, False), (5, 5, False), (10, 1, False), (2, 5, True)):
            false_pos = {"w": 0, "b": 0}
            found = {"w": 0, "b": 0}
            for _ in range(args.pairs):
                a = series(rng, runs, args.steps, run_sd, step_sd, tail, 0.0)
                same = series(rng, runs, args.steps, run_sd, step_sd, tail, 0.0)
                slow = series(rng, runs, args.steps, run_sd, step_sd, tail, 0.1)
                false_pos["w"] += compare_samples(a, same).outcome != "inconclusive"
                found["w"] += compare_samples(a, slow).outcome == "increase"
                false_pos["b"] += bootstrap_outcome(a, same, rng) != "inconclusive"
                found["b"] += bootstrap_outcome(a, slow, rng) == "increase"
            n = args.pairs
            print(
                f"{runs:>4} {run_sd:>6} {step_sd:>7} {tail!s:>5}  {false_pos['w'] / n:>6.1%} "
                f"{false_pos['b'] / n:>7.1%}  {found['w'] / n:>6.1%} {found['b'] / n:>7.1%}",
                flush=True,
            )


if __name__ == "__main__":
    main()
