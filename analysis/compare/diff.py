"""Two profiles or two runs side by side: what was added, removed or changed, largest change first.

Pure functions of traces and step tables. Trace diffs compare per-name totals (count and total time, ns)
of kernels, NVTX ranges and CPU operators; run diffs compare each phase's per-step durations with a
confidence interval for the relative difference of means, so that a verdict never rests on two means alone:
given the drift between runs measured for the configuration (`phase_verdicts(..., drift=)`), run against
run (analysis.compare.drift: one run a side judged against the drift, several by their spread); without it,
step against step (`analysis.compare.overhead.compare_samples`: the step-to-step noise only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.compare.drift import NO_DRIFT, Drift, compare_runs, phase_comparisons
from analysis.compare.overhead import STEP_SUM, Comparison, compare_samples, short_verdict
from analysis.errors import ExportError
from analysis.hta.hta_rules import hta_view
from analysis.joins.nvtx_ranges import all_ranges, tagged
from analysis.joins.runtime import _call_key
from analysis.readers import COPY_KINDS, MEMORY_KINDS
from analysis.readers.global_ids import PROCESS_MASK
from analysis.tables.kernels import kernel_summary
from analysis.trace.trace import Trace
from workloads.names import DECODE, PREFILL

DIFF_COLUMNS = [
    "Name", "Change", "Instances A", "Instances B", "Δ Instances", "Total Time A (ns)", "Total Time B (ns)",
    "Δ Total Time (ns)", "Δ Total Time (%)",
]  # fmt: skip
VERDICT_COLUMNS = [
    "Phase", "Verdict", "Mean A (ns)", "Mean B (ns)", "Δ (%)", "CI Low (%)", "CI High (%)", "Steps A",
    "Steps B", "Detail",
]  # fmt: skip
OVERALL = "overall (step)"
VERDICTS = {"increase": "regression", "decrease": "improvement", "inconclusive": "inconclusive"}


def diff_totals(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Join two per-name tables (`name`, `count`, `total_ns`) into DIFF_COLUMNS, sorted by |Δ total|.

    Change is added (only in B), removed (only in A), changed (count or total differs) or same.
    """
    keys = ["name", "count", "total_ns"]
    left = a[keys].groupby("name", sort=False).sum()
    right = b[keys].groupby("name", sort=False).sum()
    j = left.merge(right, how="outer", left_index=True, right_index=True, suffixes=("_a", "_b"))
    in_a, in_b = j["count_a"].notna(), j["count_b"].notna()
    j = j.fillna(0)
    count_a, count_b = j["count_a"].astype(np.int64), j["count_b"].astype(np.int64)
    total_a, total_b = j["total_ns_a"].astype(np.int64), j["total_ns_b"].astype(np.int64)
    delta = total_b - total_a
    change = np.where(
        ~in_a,
        "added",
        np.where(~in_b, "removed", np.where((delta != 0) | (count_a != count_b), "changed", "same")),
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(total_a > 0, delta / total_a.where(total_a > 0, 1) * 100, np.nan)
    out = pd.DataFrame(
        {
            "Name": j.index.astype(object),
            "Change": change,
            "Instances A": count_a.to_numpy(),
            "Instances B": count_b.to_numpy(),
            "Δ Instances": (count_b - count_a).to_numpy(),
            "Total Time A (ns)": total_a.to_numpy(),
            "Total Time B (ns)": total_b.to_numpy(),
            "Δ Total Time (ns)": delta.to_numpy(),
            "Δ Total Time (%)": pct,
        }
    )
    order = np.lexsort((out["Name"].to_numpy(dtype=str), -np.abs(out["Δ Total Time (ns)"].to_numpy())))
    return out.iloc[order].reset_index(drop=True)[DIFF_COLUMNS]


def kernel_totals(trace: Trace) -> pd.DataFrame:
    """name, count, total_ns per kernel name (launch shapes merged); empty when the trace has no kernels."""
    if not trace.has("kernels"):
        return _empty_totals()

    k = kernel_summary(trace, by="name")
    return pd.DataFrame({"name": k["Name"], "count": k["Instances"], "total_ns": k["Total Time (ns)"]})


def range_totals(trace: Trace) -> pd.DataFrame:
    """name (DOMAIN:NAME), count, total_ns per NVTX range name; empty when the trace has no ranges."""
    if not trace.has("nvtx"):
        return _empty_totals()

    r = all_ranges(trace)
    data = pd.DataFrame({"name": tagged(r).astype(object), "duration": r["duration_ns"]})
    g = data.groupby("name", sort=False)["duration"].agg(["size", "sum"]).reset_index()
    return pd.DataFrame({"name": g["name"], "count": g["size"], "total_ns": g["sum"]})


def op_totals(trace: Trace) -> pd.DataFrame:
    """name, count, total_ns per CPU operator (Kineto traces); empty when there are none."""
    if not trace.has("cpu_ops"):
        return _empty_totals()
    ops = trace.frame("cpu_ops", ["name_id", "start", "end"])
    g = (ops["end"] - ops["start"]).groupby(ops["name_id"]).agg(["size", "sum"])
    names = trace.strings(g.index)
    return pd.DataFrame({"name": g.index.map(names).astype(object), "count": g["size"].to_numpy(),
                         "total_ns": g["sum"].to_numpy()})  # fmt: skip


def _empty_totals() -> pd.DataFrame:
    return pd.DataFrame({"name": pd.Series(dtype=object), "count": pd.Series(dtype=np.int64),
                         "total_ns": pd.Series(dtype=np.int64)})  # fmt: skip


def diff_kernels(trace_a: Trace, trace_b: Trace) -> pd.DataFrame:
    return diff_totals(kernel_totals(trace_a), kernel_totals(trace_b))


def diff_ranges(trace_a: Trace, trace_b: Trace) -> pd.DataFrame:
    return diff_totals(range_totals(trace_a), range_totals(trace_b))


def diff_ops(trace_a: Trace, trace_b: Trace) -> pd.DataFrame:
    return diff_totals(op_totals(trace_a), op_totals(trace_b))


# --- runs: per-phase verdicts from per-step distributions ----------------------------------------------


@dataclass(frozen=True)
class PhaseVerdict:
    phase: str
    comparison: Comparison

    @property
    def label(self) -> str:
        return OVERALL if self.phase == STEP_SUM else self.phase

    @property
    def verdict(self) -> str:
        if math.isnan(self.comparison.ci_low_pct):
            return "inconclusive"
        return VERDICTS[self.comparison.outcome]


def measured_steps(steps: pd.DataFrame, phases: list[str] | None = None) -> pd.DataFrame:
    """Measured (not warm-up) phase durations, plus STEP_SUM: each step's phases added up; with `phases`,
    those alone, over the steps that hold every one of them (a sum of other phases is another step)."""
    s = steps[~steps["warmup"].astype(bool)] if "warmup" in steps else steps
    s = s[["step", "phase", "duration_ns"]]
    summed = s
    if phases is not None:
        summed = s[s["phase"].isin(phases)]
        held = summed.groupby("step")["phase"].nunique()
        summed = summed[summed["step"].isin(held.index[held == len(phases)])]
    total = summed.groupby("step", as_index=False)["duration_ns"].sum().assign(phase=STEP_SUM)
    return pd.concat([s, total[["step", "phase", "duration_ns"]]], ignore_index=True)


def common_phases(steps_a: pd.DataFrame, steps_b: pd.DataFrame) -> list[str]:
    """The phases both sides measured, in A's order."""
    a, b = (s[~s["warmup"].astype(bool)] if "warmup" in s else s for s in (steps_a, steps_b))
    return [p for p in dict.fromkeys(a["phase"]) if p in set(b["phase"]) and p != STEP_SUM]


def phase_verdicts(
    steps_a: pd.DataFrame, steps_b: pd.DataFrame, drift: Mapping[str, Drift] | None = None
) -> list[PhaseVerdict]:
    """Per phase present on both sides (and STEP_SUM last): B against A, from the per-step durations. The
    whole step is the sum of those phases, over the steps that hold them all (`unlike_steps` says what
    that leaves out).

    Each frame has step, phase, duration_ns (and optionally warmup, which is left out, and run, when a side
    holds several runs). With `drift` (phase -> the drift measured for the configuration; empty: none
    measured) runs are compared as runs (analysis.compare.drift.phase_comparisons): one run a side only
    beyond the drift, several by their spread. Without it, as steps (the step-to-step noise only).
    """
    phases = common_phases(steps_a, steps_b)
    if drift is not None:
        found = phase_comparisons(_with_run(steps_a), _with_run(steps_b), phases, drift)
        return [PhaseVerdict(phase, found[phase]) for phase in [*phases, STEP_SUM]]
    a, b = measured_steps(steps_a, phases), measured_steps(steps_b, phases)
    out = []
    for phase in [*phases, STEP_SUM]:
        c = compare_samples(a[a["phase"] == phase], b[b["phase"] == phase])
        out.append(PhaseVerdict(phase, c))
    return out


def _with_run(steps: pd.DataFrame) -> pd.DataFrame:
    return steps if "run" in steps else steps.assign(run=0)


TTFT, TPOT = "TTFT", "TPOT"  # generate's serving rows, after the phases' (workloads.names: prefill, decode)
SERVING_NOTE = (
    "TTFT is each measured step's prefill; TPOT is every decoded token's time (its Steps A and B count "
    "tokens), judged as the phases are (TTFT with prefill's drift, TPOT with decode's)"
)
TTFT_ONLY_NOTE = (
    "TTFT is each measured step's prefill, judged as the phases are (with prefill's drift); no TPOT: a side "
    "decoded no token after the first (--new-tokens 1)"
)


def serving_verdicts(
    steps_a: pd.DataFrame,
    steps_b: pd.DataFrame,
    tokens_a: pd.DataFrame,
    tokens_b: pd.DataFrame,
    drift: Mapping[str, Drift] | None = None,
) -> list[PhaseVerdict]:
    """Generate's serving figures, B against A: time to first token (each measured step's prefill) and time
    per output token (every decoded token of the measured steps; `tokens_*`: step, duration_ns, warmup, and
    run where a side holds several runs). A step's tokens share its state (cache, clocks, the machine's
    load), so TPOT's interval is drawn from the steps' token means (Steps A and B count the tokens).

    Without `drift`, by compare_samples as the phases' (the steps stand as runs). With it (phase -> the drift
    measured for the configuration, as `phase_verdicts` takes it), run against run: TTFT with prefill's
    drift, TPOT with decode's (a token's time drifts with its phase), one run a side only beyond it.
    TTFT where both sides prefilled (generate runs: with --new-tokens 1 the first token is all there is,
    and TTFT all that is measured); TPOT where both decoded a token after it. Nothing for a training run."""
    measured = [t[~t["warmup"].astype(bool)] if "warmup" in t else t for t in (tokens_a, tokens_b)]
    decoded = not any(t.empty for t in measured)
    out = []
    prefill = [s[(s["phase"] == PREFILL) & ~s["warmup"].astype(bool)] for s in (steps_a, steps_b)]
    if drift is None:
        if all(len(p) for p in prefill):
            out.append(PhaseVerdict(TTFT, compare_samples(*prefill)))
        if decoded:
            a, b = (t.assign(run=t["step"]) for t in measured)
            out.append(PhaseVerdict(TPOT, compare_samples(a, b)))
        return out
    if all(len(p) for p in prefill):
        pa, pb = (_with_run(p) for p in prefill)
        out.append(PhaseVerdict(TTFT, _between_runs(pa, pb, drift.get(PREFILL))))
    if decoded:
        ta, tb = (_with_run(t) for t in measured)
        out.append(PhaseVerdict(TPOT, _between_runs(ta, tb, drift.get(DECODE), by_step=True)))
    return out


def _between_runs(a: pd.DataFrame, b: pd.DataFrame, drift: Drift | None, by_step: bool = False) -> Comparison:
    """compare_runs of two sides' run means of duration_ns; one run a side, its steps (by_step: each step's
    mean, the tokens of a step being one sample of the machine's state) bound the interval from below."""
    one = a["run"].nunique() == 1 and b["run"].nunique() == 1

    def steps(t: pd.DataFrame) -> np.ndarray:
        if not one:
            return np.empty(0)
        col = t.groupby("step")["duration_ns"].mean() if by_step else t["duration_ns"]
        return col.to_numpy(dtype="float64")

    return compare_runs(
        a.groupby("run")["duration_ns"].mean().to_numpy(), b.groupby("run")["duration_ns"].mean().to_numpy(),
        drift, steps_a=steps(a), steps_b=steps(b), samples=(len(a), len(b)),
    )  # fmt: skip


def unlike_steps(
    steps_a: pd.DataFrame, steps_b: pd.DataFrame, labels: tuple[str, str] = ("A", "B")
) -> list[str]:
    """What the whole step of `phase_verdicts` leaves out, as notes: phases one side alone measured, and
    steps without one of the phases both did. Nothing when every step of both holds the same phases."""
    phases = common_phases(steps_a, steps_b)
    notes = []
    if not phases:
        empty = [
            label for label, steps in zip(labels, (steps_a, steps_b), strict=True) if not _measured(steps)
        ]
        if empty:  # a run stopped before its first measured step: it times nothing, not other phases
            have = "has" if len(empty) == 1 else "have"
            return [f"{' and '.join(empty)} {have} no measured steps: there is nothing to compare"]
        return [f"{labels[0]} and {labels[1]} time no phase in common: their steps are not compared"]
    for label, steps in zip(labels, (steps_a, steps_b), strict=True):
        s = steps[~steps["warmup"].astype(bool)] if "warmup" in steps else steps
        only = [p for p in dict.fromkeys(s["phase"]) if p not in phases and p != STEP_SUM]
        if only:
            notes.append(
                f"{label} alone times {', '.join(map(str, only))}: left out of the overall step, which sums "
                f"{', '.join(phases)} on both sides"
            )
        held = s[s["phase"].isin(phases)].groupby("step")["phase"].nunique()
        held = held.reindex(s["step"].unique(), fill_value=0)
        short = held.index[held < len(phases)]
        if len(short):
            first = short.min()
            lacking = [p for p in phases if p not in set(s[s["step"] == first]["phase"])]
            notes.append(
                f"{len(short):,} of {len(held):,} measured steps of {label} do not time all of "
                f"{', '.join(phases)} (step {first} lacks {', '.join(lacking)}): left out of the overall "
                "step, whose sum would be of other work"
            )
    return notes


def _measured(steps: pd.DataFrame) -> int:
    return int((~steps["warmup"].astype(bool)).sum()) if "warmup" in steps else len(steps)


def verdict_table(verdicts: list[PhaseVerdict]) -> pd.DataFrame:
    rows = [
        {
            "Phase": v.label,
            "Verdict": v.verdict,
            "Mean A (ns)": v.comparison.baseline_mean,
            "Mean B (ns)": v.comparison.treatment_mean,
            "Δ (%)": v.comparison.effect_pct,
            "CI Low (%)": v.comparison.ci_low_pct,
            "CI High (%)": v.comparison.ci_high_pct,
            "Steps A": v.comparison.baseline_samples,
            "Steps B": v.comparison.treatment_samples,
            "Detail": detail(v.comparison),
        }
        for v in verdicts
    ]
    out = pd.DataFrame(rows, columns=VERDICT_COLUMNS)
    out.attrs["deciding"] = ["Phase", "Verdict", "Mean A (ns)", "Mean B (ns)", "Δ (%)"]
    return out


def detail(c: Comparison) -> str:
    """The verdict's figures, `+8.1% (+2.0…+14.3)`, or `no drift measured` where one run a side had no
    interval (`basis_words` says how an interval was drawn, in the notes)."""
    return "no drift measured" if c.basis == NO_DRIFT else short_verdict(c)


def unjudged(verdicts: list[PhaseVerdict]) -> list[PhaseVerdict]:
    """The phases no interval could be drawn for because neither side nor the store showed how runs drift
    apart (one run a side, no drift measured): a gate cannot pass or fail them."""
    return [v for v in verdicts if v.comparison.basis == NO_DRIFT]


def gate_failures(verdicts: list[PhaseVerdict], pct: float) -> list[PhaseVerdict]:
    """The phases that fail a `--gate PCT`.

    A phase fails the gate when it is a regression (the interval excludes zero) and its estimated slowdown
    exceeds `pct`; an inconclusive phase never fails it.
    """
    return [v for v in verdicts if v.verdict == "regression" and v.comparison.effect_pct > pct]


# --- Kineto traces: one profiler step's GPU events, as HTA's TraceDiff counts them ----------------------


def _memop_names(kinds: pd.DataFrame, copy: bool) -> pd.Series:
    """Kineto's own memcpy / memset names back from CUPTI's kinds ("Memcpy HtoD (Pinned -> Device)")."""
    copy_name = {v: k for k, v in COPY_KINDS.items()}
    memory = {v: k for k, v in MEMORY_KINDS.items()}
    if copy:
        return (
            "Memcpy " + kinds["copy_kind"].map(copy_name) + " (" + kinds["src_kind"].map(memory) + " -> "
            + kinds["dst_kind"].map(memory) + ")"
        )  # fmt: skip
    return "Memset (" + kinds["mem_kind"].map(memory) + ")"


def step_ops_summary(trace: Trace, step: str | None = None) -> pd.DataFrame:
    """cat, name, count, total_ns of every event of one profiler step: HTA's `get_ops_summary`.

    As HTA's TraceDiff takes them: times rounded to whole µs (analysis.hta.hta_rules, without its last-step
    rule, which TraceDiff does not apply), the first `ProfilerStep#` unless `step` names one. A CPU event
    (operator `cpu_op`, CUDA call `cuda_runtime`, annotation `user_annotation`) belongs to the step when it
    starts inside it (start <= ts < end); a GPU event (`kernel`, `gpu_memcpy`, `gpu_memset`) when the CUDA
    call with its correlation id does. Totals in ns (HTA prints µs: ÷ 1000). Sorted by (cat, name).
    """
    view = hta_view(trace)
    view._last_step = None  # TraceDiff parses without the last-step filter
    ranges = view.frame("nvtx", ["name", "start", "end"]) if view.has("nvtx") else None
    steps = ranges[ranges["name"].astype(str).str.startswith("ProfilerStep#")] if ranges is not None else None
    if steps is not None and step is not None:
        steps = steps[steps["name"] == step]
    if steps is None or steps.empty:
        raise ExportError(f"no {step or 'ProfilerStep#'} range in {trace.path}")
    first = steps.sort_values("start").iloc[0]

    def inside(start: pd.Series) -> pd.Series:
        return (start >= first["start"]) & (start < first["end"])

    parts = []
    ann = ranges[inside(ranges["start"])]
    parts.append(("user_annotation", ann["name"].astype(object), ann["end"] - ann["start"]))
    for cat, frame in (("cpu_op", "cpu_ops"), ("cuda_runtime", "runtime")):
        if view.has(frame):
            o = view.frame(frame, ["name_id", "start", "end"])
            o = o[inside(o["start"])]
            parts.append((cat, o["name_id"].map(view.strings(o["name_id"].unique())), o["end"] - o["start"]))
    keys = np.zeros(
        0, dtype=np.int64
    )  # (process, correlationId) of the calls in the step: ids repeat across ranks
    if view.has("runtime"):
        calls = view.frame("runtime", ["start", "correlation_id", "global_tid"])
        calls = calls[inside(calls["start"])]
        keys = _call_key(calls["correlation_id"].to_numpy(), calls["global_tid"].to_numpy() & PROCESS_MASK)

    def launched(df: pd.DataFrame) -> pd.DataFrame:
        return df[np.isin(_call_key(df["correlation_id"].to_numpy(), df["global_pid"].to_numpy()), keys)]

    if view.has("kernels"):
        k = launched(view.frame("kernels", ["name_id", "start", "end", "correlation_id", "global_pid"]))
        parts.append(("kernel", k["name_id"].map(view.strings(k["name_id"].unique())), k["end"] - k["start"]))
    for cat, frame, cols in (
        ("gpu_memcpy", "memcpy", ["copy_kind", "src_kind", "dst_kind"]),
        ("gpu_memset", "memset", ["mem_kind"]),
    ):
        if view.has(frame):
            m = launched(view.frame(frame, [*cols, "start", "end", "correlation_id", "global_pid"]))
            parts.append((cat, _memop_names(m, frame == "memcpy"), m["end"] - m["start"]))
    data = pd.concat(
        [
            pd.DataFrame({"cat": cat, "name": names.to_numpy(), "duration": d.to_numpy()})
            for cat, names, d in parts
        ],
        ignore_index=True,
    )
    g = data.groupby(["cat", "name"])["duration"].agg(["size", "sum"]).reset_index()
    g["cat"], g["name"] = g["cat"].astype(object), g["name"].astype(object)
    return g.rename(columns={"size": "count", "sum": "total_ns"}).astype(
        {"count": np.int64, "total_ns": np.int64}
    )


GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def diff_step(
    trace_a: Trace, trace_b: Trace, step: str | None = None, *, gpu_only: bool = False
) -> pd.DataFrame:
    """One profiler step of each Kineto trace, B against A: HTA TraceDiff's compare_traces (all events, or
    with `gpu_only` its device_type=GPU table), per name."""
    a, b = step_ops_summary(trace_a, step), step_ops_summary(trace_b, step)
    if gpu_only:
        a, b = a[a["cat"].isin(GPU_CATS)], b[b["cat"].isin(GPU_CATS)]
    return diff_totals(a, b)
