"""Eager against torch.compile for the same configuration, side by side (seed 003's eager/compiled tables).

Built from stored runs and their step timings (the results store's columns), so it needs no extra field:
per configuration that has both an eager and a compiled run (without a profiler, status ok), per phase and
for the whole step: the median measured time of each side with its spread (standard deviation) and the
median's 95% interval, the speed-up (eager / compiled) with its interval, and the compiled run's first
step minus its median: compilation, which the measured steps leave out. Every figure comes from
analysis.runs.steady, as `harness show` prints it; the row REMAINDER (median step − Σ phase medians) makes the
phase rows add up to the step row.

Which runs are compared is said, never guessed silently: the baseline is the eager run named (`baseline`),
or else the newest eager run of the configuration, and `baseline_choice` says which it was and why.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.runs.steady import REMAINDER, STEP, RunSteady, ratio_interval, run_steady
from workloads.names import MODES, PREFILL, phases_for

SAME_CONFIG = [
    "model", "mode", "device", "precision", "attention", "batch_size", "context_length", "new_tokens"
]  # fmt: skip
# an optional column of the runs: the rest of a configuration its times depend on (instrumentation such as
# --nvtx-detail or --memory, a plant, the step's knobs, generate's tokens), filled by the caller; runs are
# paired only within one value of it, which the table does not show
SETUP = "setup"
COMPILE = "compile (first step) (ns)"
# phases a --compile run leaves eager: generate compiles its decode step only, so its prefill's first step
# beyond the median is no compilation and no compile time is given for it (nor for the remainder, which
# would hold the prefill's); the step's stays the whole first step's excess
NOT_COMPILED = frozenset({PREFILL})
NOT_COMPILED_NOTE = "not compiled (--compile compiles generate's decode step only)"
COLUMNS = [
    *SAME_CONFIG,
    "phase",
    "eager (ns)",
    "eager std (ns)",
    "eager CI low (ns)",
    "eager CI high (ns)",
    "compiled (ns)",
    "compiled std (ns)",
    "compiled CI low (ns)",
    "compiled CI high (ns)",
    "speed-up",
    "speed-up CI low",
    "speed-up CI high",
    COMPILE,
    "eager first step (ns)",
    "compiled first step (ns)",
    "eager run",
    "compiled run",
]
__all__ = [
    "COLUMNS",
    "COMPILE",
    "NOT_COMPILED",
    "NOT_COMPILED_NOTE",
    "REMAINDER",
    "SETUP",
    "STEP",
    "baseline_choice",
    "compile_comparison",
    "compile_pairs",
    "unpaired_compiled",
]


def _ok(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[(runs["status"] == "ok") & runs["profiler"].fillna("none").isin(["none", ""])]


def _configurations(runs: pd.DataFrame) -> list[tuple[pd.DataFrame, pd.Series]]:
    """The runs (without a profiler, status ok) of each configuration (SAME_CONFIG and SETUP), oldest
    first, with which of them are compiled."""
    if runs.empty:
        return []
    ok = _ok(runs)
    keys = [k for k in (*SAME_CONFIG, SETUP) if k in ok]
    return [(g, g["compile"].astype(bool)) for _, g in ok.groupby(keys, sort=False, dropna=False)]


def compile_pairs(runs: pd.DataFrame, baseline: str | None = None) -> list[tuple[dict, dict]]:
    """(eager, compiled) run rows of each configuration that has both: the newest of each side, or with
    `baseline` (an eager run's id) that run against the newest compiled run of its configuration."""
    pairs = []
    for group, compiled in _configurations(runs):
        eager = group[~compiled]
        if baseline is not None:
            eager = eager[eager["run_id"] == baseline]
        if compiled.any() and len(eager):
            pairs.append((eager.iloc[-1].to_dict(), group[compiled].iloc[-1].to_dict()))
    return pairs


def unpaired_compiled(runs: pd.DataFrame) -> list[list[dict]]:
    """The compiled runs of each configuration that has no eager run, one list per configuration, oldest
    first: no table row holds them, whatever the baseline."""
    return [group.to_dict("records") for group, compiled in _configurations(runs) if compiled.all()]


def baseline_choice(
    runs: pd.DataFrame,
    pairs: list[tuple[dict, dict]],
    baseline: str | None,
    passed_over: pd.DataFrame | None = None,
) -> list[str]:
    """One line per pair: which eager run is the baseline, and why (named, or the newest of how many).
    `passed_over`: rows cut from the frame `runs` was (its index their order) as damaged; those of a pair's
    configuration are not counted, and the ones newer than its baseline are named."""
    ok = _ok(runs) if not runs.empty else runs
    damaged = _ok(passed_over) if passed_over is not None and not passed_over.empty else ok.iloc[:0]
    lines = []
    for eager, compiled in pairs:
        if baseline is not None:
            why = "named by --baseline"
        else:
            n = len(_eager_like(ok, eager))
            every = pd.concat([ok, damaged]).sort_index() if len(damaged) else ok
            ids = list(_eager_like(every, eager)["run_id"])
            newer = [i for i in ids[ids.index(eager["run_id"]) + 1 :] if i in set(damaged["run_id"])]
            sound = " sound" if len(ids) > n else ""
            why = f"the only{sound} eager run" if n == 1 else f"the newest of {n}{sound} eager runs"
            why += " of this configuration"
            if newer:
                why += f", {', '.join(newer)} passed over as damaged"
            if n > 1:
                why += "; --baseline RUN picks another"
        lines.append(f"baseline: eager run {eager['run_id']} ({why}); compiled run {compiled['run_id']}")
    return lines


def _eager_like(runs: pd.DataFrame, eager: dict) -> pd.DataFrame:
    """The eager runs among `runs` of `eager`'s configuration (SAME_CONFIG and SETUP)."""
    same = runs[~runs["compile"].astype(bool)]
    for k in (*SAME_CONFIG, SETUP):
        if k in same:
            v = eager.get(k)
            same = same[same[k].isna()] if v is None or v != v else same[same[k] == v]
    return same


def _figures(steps: pd.DataFrame, run_id: str, phases: tuple[str, ...]) -> RunSteady:
    s = steps[steps["run_id"] == run_id]
    ranks = s["rank"] if "rank" in s else [0] * len(s)
    rows = zip(s["step"], s["phase"], s["duration_ns"], s["warmup"], ranks, strict=True)
    return run_steady(rows, phases)


def _phases(run: dict) -> tuple[str, ...]:
    """The phases a run times (workloads.names.phases_for): a train run across ranks has its gradient
    all-reduce too. A stored run of no known mode has none."""
    ranks = run.get("world_size")
    return phases_for(run["mode"], int(ranks) if pd.notna(ranks) else 1) if run["mode"] in MODES else ()


def _nan(x: float | None) -> float:
    return math.nan if x is None else x


def _row(phase: str, e: RunSteady, c: RunSteady) -> dict:
    ef, cf = e.figures[phase], c.figures[phase]
    low, high = ratio_interval(e.samples[phase], c.samples[phase])
    return {
        "phase": phase,
        "eager (ns)": ef.median_ns,
        "eager std (ns)": ef.std_ns,
        "eager CI low (ns)": ef.ci_low_ns,
        "eager CI high (ns)": ef.ci_high_ns,
        "compiled (ns)": cf.median_ns,
        "compiled std (ns)": cf.std_ns,
        "compiled CI low (ns)": cf.ci_low_ns,
        "compiled CI high (ns)": cf.ci_high_ns,
        "speed-up": ef.median_ns / cf.median_ns if cf.median_ns else math.nan,
        "speed-up CI low": low,
        "speed-up CI high": high,
        COMPILE: math.nan if phase in NOT_COMPILED else _nan(c.compile_ns(phase)),
        "eager first step (ns)": _nan(e.first.get(phase)),
        "compiled first step (ns)": _nan(c.first.get(phase)),
    }


def _remainder(phases: list[str], e: RunSteady, c: RunSteady, step: dict) -> dict:
    """The row that makes the phases add up to the step: step − Σ phases, column by column."""
    compile_sum = [None if p in NOT_COMPILED else c.compile_ns(p) for p in phases]
    return {
        "phase": REMAINDER,
        "eager (ns)": _nan(e.remainder(phases)),
        "compiled (ns)": _nan(c.remainder(phases)),
        COMPILE: step[COMPILE] - sum(compile_sum) if None not in compile_sum else math.nan,
        "eager first step (ns)": step["eager first step (ns)"] - sum(_nan(e.first.get(p)) for p in phases),
        "compiled first step (ns)": step["compiled first step (ns)"]
        - sum(_nan(c.first.get(p)) for p in phases),
    }


def compile_comparison(runs: pd.DataFrame, steps: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """One row per configuration and phase, then REMAINDER and the whole step: COLUMNS, times in ns."""
    rows = []
    for eager, compiled in compile_pairs(runs, baseline):
        phases = _phases(eager)
        e, c = _figures(steps, eager["run_id"], phases), _figures(steps, compiled["run_id"], phases)
        both = [p for p in phases if p in e.figures and p in c.figures]
        config = {
            **{k: eager.get(k) for k in SAME_CONFIG},
            "eager run": eager["run_id"],
            "compiled run": compiled["run_id"],
        }
        rows += [{**config, **_row(p, e, c)} for p in both]
        if STEP in e.figures and STEP in c.figures:
            step = _row(STEP, e, c)
            if len(both) > 1:
                rows.append({**config, **_remainder(both, e, c, step)})
            rows.append({**config, **step})
    out = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("batch_size", "context_length", "new_tokens"):  # counts print as integers, missing or not
        out[col] = pd.to_numeric(out[col]).astype("Int64")
    # the configuration columns that do not vary say nothing in a table: the caller names them in its title
    out.attrs["priority"] = [
        "model",
        "phase",
        "eager (ns)",
        "compiled (ns)",
        "speed-up",
        "speed-up CI low",
        "speed-up CI high",
        COMPILE,
        "eager std (ns)",
        "compiled std (ns)",
    ]
    return out
