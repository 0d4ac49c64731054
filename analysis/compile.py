"""Eager against torch.compile for the same configuration, side by side (seed 003's eager/compiled tables).

Built from stored runs and their step timings (the results store's columns), so it needs no extra field:
per configuration that has both an eager and a compiled run (the newest of each, without a profiler, status
ok), per phase and for the whole step: the median measured time of each, the speed-up (eager / compiled),
and the compiled run's first step minus its median: compilation, which the measured steps leave out.
"""

from __future__ import annotations

import pandas as pd

from analysis.names import PHASES_BY_MODE

SAME_CONFIG = ["model", "mode", "device", "precision", "attention", "batch_size", "context_length"]
COMPILE = "compile (first step) (ns)"
STEP = "step"  # the row of whole steps (sum of the phases)
COLUMNS = [
    *SAME_CONFIG,
    "phase",
    "eager (ns)",
    "compiled (ns)",
    "speed-up",
    "compile (first step) (ns)",
    "eager first step (ns)",
    "compiled first step (ns)",
    "eager run",
    "compiled run",
]


def compile_pairs(runs: pd.DataFrame) -> list[tuple[dict, dict]]:
    """(eager, compiled) run rows of each configuration that has both, newest of each side."""
    if runs.empty:
        return []
    ok = runs[(runs["status"] == "ok") & runs["profiler"].fillna("none").isin(["none", ""])]
    keys = [k for k in SAME_CONFIG if k in ok]
    pairs = []
    for _, group in ok.groupby(keys, sort=False, dropna=False):
        compiled = group["compile"].astype(bool)
        if compiled.any() and (~compiled).any():
            pairs.append((group[~compiled].iloc[-1].to_dict(), group[compiled].iloc[-1].to_dict()))
    return pairs


def _per_phase(steps: pd.DataFrame, run_id: str, phases: tuple[str, ...]) -> tuple[dict, dict]:
    """Median measured time and first-step time per phase (and STEP) of one run."""
    s = steps[steps["run_id"] == run_id]
    wide = s.pivot_table(index=["step", "warmup"], columns="phase", values="duration_ns", aggfunc="sum")
    wide = wide.reset_index().sort_values("step")
    present = [p for p in phases if p in wide]
    wide[STEP] = wide[present].sum(axis=1)
    measured = wide[~wide["warmup"].astype(bool)]
    first = wide.iloc[0] if len(wide) and bool(wide.iloc[0]["warmup"]) else None
    cols = [*present, STEP]
    median = {c: float(measured[c].median()) for c in cols} if len(measured) else {}
    first_step = {c: float(first[c]) for c in cols} if first is not None else {}
    return median, first_step


def compile_comparison(runs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration and phase (then the whole step): COLUMNS, times in ns."""
    rows = []
    for eager, compiled in compile_pairs(runs):
        phases = PHASES_BY_MODE.get(eager["mode"], ())
        e_med, e_first = _per_phase(steps, eager["run_id"], phases)
        c_med, c_first = _per_phase(steps, compiled["run_id"], phases)
        for phase in [*phases, STEP]:
            if phase not in e_med or phase not in c_med:
                continue
            first = c_first.get(phase)
            rows.append(
                {
                    **{k: eager.get(k) for k in SAME_CONFIG},
                    "phase": phase,
                    "eager (ns)": e_med[phase],
                    "compiled (ns)": c_med[phase],
                    "speed-up": e_med[phase] / c_med[phase] if c_med[phase] else float("nan"),
                    "compile (first step) (ns)": max(first - c_med[phase], 0.0)
                    if first is not None
                    else None,
                    "eager first step (ns)": e_first.get(phase),
                    "compiled first step (ns)": first,
                    "eager run": eager["run_id"],
                    "compiled run": compiled["run_id"],
                }
            )
    out = pd.DataFrame(rows, columns=COLUMNS)
    # the configuration columns that do not vary say nothing in a table: the caller names them in its title
    out.attrs["priority"] = [
        "model",
        "phase",
        "eager (ns)",
        "compiled (ns)",
        "speed-up",
        "compile (first step) (ns)",
    ]
    return out
