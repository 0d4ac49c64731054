"""Two exports or traces of one job, B against A: did it get faster, by how much, and where.

`diff_exports(a, b)` gives the answer first, then the detail:

- per side, GPU time (the sum of kernel durations) per device and over all devices, and the wall span (first
  to last GPU event, CUDA call or NVTX range); per device the span from its first GPU event to its last
  split into compute, communication not under compute (exposed), memory copies and sets under neither,
  other GPU work (syncs) and idle, which add up to the span, plus communication under compute (overlapped).
  Kinds are HTA's, unions and overlaps its `merge` and `sweep` (analysis.hta.gpu_events.device_times).
- iterations (analysis.compare.iterations): `--iteration-range NAME`, else the harness's `step` ranges, else
  Kineto's `ProfilerStep#N`.
- a verdict: with two iterations or more a side, from the confidence interval of the relative difference of
  mean iteration time (analysis.compare.overhead.compare_samples, the statistic of the per-phase verdicts of
  two runs,
  worded by analysis.compare.diff.PhaseVerdict). Without iterations, from GPU busy time with each device a
  sample
  (the spread between ranks stands in for the spread between iterations): marked weaker. With one device a
  side there is no spread, and no verdict.
- comparability: GPU count, schema versions, the share of kernel names in common, the ratio of kernel counts.
  Two captures on different GPU counts, one with GPU work and one without, under half of the kernel names in
  common, or kernel counts apart by more than 2× get no verdict, with the reason.
- per table (kernels, memory copies and sets, NVTX ranges grouped by operator, CUDA API, CPU operators) the
  names B against A, largest change first (analysis.compare.diff.diff_totals).

`iteration=N` restricts the figures and tables to iteration number N of each side (the harness's step index,
ProfilerStep#N's N, else counted from 0 over every range found, warm-up included: `Iterations.window`): GPU
work whose launching call started inside it, calls and ranges that started inside it, on the same process. The
verdict still comes from every iteration. Where warm-up iterations are left out (`warmup=N`, or the harness's
`measured` range), the figures and tables are restricted the same way to the iterations after warm-up
(`Iterations.measured`), so that they hold what the verdict holds. Either on a side without iterations is
refused: its figures would be of the whole capture.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis.compare.diff import PhaseVerdict, diff_totals, gate_failures
from analysis.compare.iterations import Iterations, find_iterations, in_windows
from analysis.compare.overhead import Comparison, compare_samples
from analysis.errors import AnalysisError
from analysis.hta.breakdown import _launch_start
from analysis.hta.gpu_events import DeviceTime, device_times, gpu_events
from analysis.joins.nvtx_ranges import all_ranges, open_ranges_said, tagged
from analysis.joins.runtime import runtime_calls
from analysis.nvtx_names import group_names, grouping_notes, has_fields
from analysis.readers.global_ids import pid_of
from analysis.trace.frames import GPU_WORK
from analysis.trace.trace import NULL, Trace
from workloads.names import counted

MIN_NAMES_COMMON_PCT = 50.0  # under this share of kernel names in common, no verdict
MAX_COUNT_RATIO = 2.0  # kernel counts further apart than this, no verdict
SPLIT = (
    ("compute", "compute"),
    ("comm_exposed", "comm., exposed"),
    ("comm_overlapped", "comm., overlapped"),
    ("memory", "copies and sets"),
    ("other", "other GPU work (syncs)"),
    ("idle", "GPU idle"),
)
HEADLINE_COLUMNS = ["Figure", "A (ns)", "B (ns)", "Δ (ns)", "Δ (%)"]


# --- one side -----------------------------------------------------------------------------------------


@dataclass
class Side:
    """One capture, summarised."""

    label: str
    format: str
    schema: str
    devices: list[DeviceTime]
    span_ns: int | None  # wall span (None: nothing timed)
    iterations: Iterations
    kernel_names: frozenset[str]
    events: pd.DataFrame | None = field(default=None, repr=False)
    # pid, start, end the figures and tables are restricted to: `--iteration N`'s, or the iterations after
    # warm-up where some were left out (the tables then leave out what the verdict leaves out); None: all
    windows: pd.DataFrame | None = field(default=None, repr=False)
    models: tuple[str, ...] = ()  # the machine's GPU models, as the capture names them (none: not named)

    @property
    def gpus(self) -> int:
        return len(self.devices)

    @property
    def kernels(self) -> int:
        return sum(d.kernels for d in self.devices)

    @property
    def kernel_ns(self) -> int:
        return sum(d.kernel_ns for d in self.devices)

    def total(self, key: str) -> int:
        return sum(getattr(d, key) for d in self.devices)


def _schema(trace: Trace) -> str:
    meta = trace.meta
    if trace.format == "kineto-json":
        return f"Kineto {meta.get('schema', '?')}"
    version = meta.get("producer_version")
    schema = meta.get("schema")
    if version:
        return f"{schema or 'unknown'} (nsys {version})"
    return str(schema) if schema else "unknown (no metadata table)"


def _has_gpu(trace: Trace) -> bool:
    return any(trace.has(f) for f in (*GPU_WORK, "syncs"))


def _events(trace: Trace, windows: pd.DataFrame | None) -> pd.DataFrame | None:
    if not _has_gpu(trace):
        return None
    ev = gpu_events(trace)
    if windows is not None:
        launch = _launch_start(trace, ev)
        when = np.where(launch != NULL, launch, ev["start"].to_numpy())
        ev = ev[in_windows(pid_of(ev["global_pid"].to_numpy()), when, windows)].reset_index(drop=True)
    return ev


def _wall_span(trace: Trace, events: pd.DataFrame | None, windows: pd.DataFrame | None) -> int | None:
    if windows is not None:
        return int(windows["end"].max() - windows["start"].min())
    lo, hi = [], []
    if events is not None and len(events):
        lo.append(int(events["start"].min()))
        hi.append(int(events["end"].max()))
    for frame in ("runtime", "nvtx"):
        if trace.has(frame):
            f = trace.frame(frame, ["start", "end"])
            if len(f):
                lo.append(int(f["start"].min()))
                hi.append(int(f["end"].max()))
    return max(hi) - min(lo) if lo else None


def summarise(
    trace: Trace,
    label: str,
    *,
    iteration_range: str | None = None,
    iteration: int | None = None,
    warmup: int = 0,
) -> Side:
    its = find_iterations(trace, iteration_range, warmup=warmup, label=label)
    windows = None
    for given, value in (("--iteration", iteration), ("--warmup", warmup or None)):
        if value is not None and not len(its.ranges):  # nothing to pick or leave out: not the whole capture
            raise AnalysisError(
                f"{given} {value}: no iterations in {label} (no `step` or ProfilerStep#N ranges; "
                "--iteration-range NAME names a repeated NVTX range)"
            )
    if iteration is not None:
        windows = its.window(iteration, label)
    elif its.warmup and its.count:
        windows = its.measured()
    elif its.warmup:  # every iteration is warm-up: the whole capture is not what is left after it
        have = counted(int(its.ranges["index"].max()) + 1, "iteration")
        why = f"--warmup {warmup}" if warmup else "its `measured` range holds none"
        raise AnalysisError(f"{label}: none of its {have} ({its.source}) is left after warm-up ({why})")
    events = _events(trace, windows)
    devices = device_times(events) if events is not None else []
    names = frozenset()
    if events is not None:
        names = frozenset(events.loc[(events["kind"] == "kernel").to_numpy(), "name"].astype(str).unique())
    span = _wall_span(trace, events, windows)
    models = tuple(sorted({str(n) for n in trace.meta.get("devices") or () if n and str(n) != "None"}))
    return Side(label, trace.format, _schema(trace), devices, span, its, names, events, windows, models)


# --- comparability and the verdict --------------------------------------------------------------------


@dataclass(frozen=True)
class Comparability:
    gpus: tuple[int, int]
    schema: tuple[str, str]
    kernels: tuple[int, int]
    names_common_pct: float  # NaN: neither side has kernels
    kernel_ratio: float  # B / A kernel launches; NaN without kernels on A
    reasons: tuple[str, ...]  # why no verdict; empty when comparable
    models: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # GPU models of A and B (none: not named)

    @property
    def other_models(self) -> bool:
        """Both captures name their GPUs, and not the same ones: their times differ by that too."""
        return all(self.models) and self.models[0] != self.models[1]

    @property
    def comparable(self) -> bool:
        return not self.reasons


def _gpus(n: int) -> str:
    return "no GPU" if n == 0 else "1 GPU" if n == 1 else f"{n} GPUs"


def comparability(a: Side, b: Side) -> Comparability:
    reasons = []
    if a.gpus != b.gpus:
        reasons.append(f"GPU work on {_gpus(a.gpus)} in A, {_gpus(b.gpus)} in B")
    union = a.kernel_names | b.kernel_names
    common = 100 * len(a.kernel_names & b.kernel_names) / len(union) if union else math.nan
    ratio = b.kernels / a.kernels if a.kernels else math.nan
    if union and common < MIN_NAMES_COMMON_PCT:
        shown = f"{common:.1f}".removesuffix(".0")  # the comparability line's digits: 49.6 is not "50"
        reasons.append(f"only {shown}% of kernel names in common (under {MIN_NAMES_COMMON_PCT:.0f}%)")
    if a.kernels and b.kernels and not 1 / MAX_COUNT_RATIO <= ratio <= MAX_COUNT_RATIO:
        reasons.append(
            f"kernel counts {a.kernels:,} and {b.kernels:,} are more than {MAX_COUNT_RATIO:g}× apart"
        )
    return Comparability(
        (a.gpus, b.gpus), (a.schema, b.schema), (a.kernels, b.kernels), common, ratio, tuple(reasons),
        (a.models, b.models),
    )  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    """The answer: regression, improvement, inconclusive, or refused (not comparable) / none (nothing to
    judge). `basis` is what was compared; `weaker` when that is not iteration time."""

    verdict: str
    basis: str  # "iteration time" | "GPU busy time" | ""
    weaker: bool
    reason: str
    comparison: Comparison | None = None

    @property
    def phase(self) -> PhaseVerdict | None:
        return PhaseVerdict(self.basis, self.comparison) if self.comparison is not None else None


def _compare(a: np.ndarray, b: np.ndarray) -> Comparison:
    return compare_samples(pd.DataFrame({"duration_ns": a}), pd.DataFrame({"duration_ns": b}))


def verdict(a: Side, b: Side, comp: Comparability) -> Verdict:
    if not comp.comparable:
        return Verdict("refused", "", False, "not comparable: " + "; ".join(comp.reasons))
    ia, ib = a.iterations.count, b.iterations.count
    if ia >= 2 and ib >= 2:
        c = _compare(a.iterations.durations, b.iterations.durations)
        pv = PhaseVerdict("iteration time", c)
        return Verdict(pv.verdict, "iteration time", False, f"{ia} → {ib} iterations", c)
    missing = [s for s, n in (("A", ia), ("B", ib)) if n < 2]
    why = f"fewer than 2 iterations in {' and '.join(missing)}"
    if a.devices and b.devices:
        c = _compare(np.array([d.busy_ns for d in a.devices]), np.array([d.busy_ns for d in b.devices]))
        pv = PhaseVerdict("GPU busy time", c)
        detail = f"{why}; each device's busy time a sample, {a.gpus} → {b.gpus} devices"
        if a.gpus < 2 or b.gpus < 2:
            detail = f"{why}; one device a side: no spread to judge from"
        return Verdict(pv.verdict, "GPU busy time", True, detail, c)
    return Verdict("none", "", True, f"{why}, and no GPU work on both sides: nothing to judge")


def gate_failed(v: Verdict, pct: float) -> bool:
    """A regression verdict whose estimated slowdown exceeds `pct` (analysis.compare.diff.gate_failures)."""
    return v.phase is not None and bool(gate_failures([v.phase], pct))


def gate_blind(verdict: Verdict, gate: float) -> str | None:
    """Where two exports' gate passes but the verdict's interval reaches beyond it: one line saying that a
    regression of `gate` percent could not have been told from the noise of these iterations (None: it
    could, or there is no verdict)."""
    c = verdict.comparison
    if c is None or gate_failed(verdict, gate):
        return None
    if c.ci_high_pct != c.ci_high_pct:  # NaN: no interval (one sample a side), so no judgement at all
        return (
            f"gate: passed, but the {verdict.basis} has no interval ({verdict.reason}): a regression of "
            f"{gate:g}% could not be told from the noise; give more iterations a side (a longer capture)"
        )
    if not c.ci_high_pct > gate:
        return None
    return (
        f"gate: passed, but the {verdict.basis}'s interval reaches {c.ci_high_pct:+.1f}% "
        f"({c.baseline_samples} and {c.treatment_samples} samples): a regression of {gate:g}% could not be "
        "told from the noise; give more iterations a side (a longer capture)"
    )


# --- the diff -----------------------------------------------------------------------------------------


@dataclass
class ExportDiff:
    a: Side
    b: Side
    headline: pd.DataFrame  # HEADLINE_COLUMNS, plus key and unit (attrs["keys"], attrs["units"])
    comparability: Comparability
    verdict: Verdict
    tables: list[tuple[str, pd.DataFrame]]
    grouping: str  # the NVTX grouping line, where the grouping changed a name ("" where it changed none)
    iteration: int | None = None
    notes: list[str] = field(default_factory=list)

    def top_changes(self) -> tuple[pd.Series | None, pd.Series | None]:
        """The kernel with the largest increase and the one with the largest decrease of total time."""
        kernels = dict(self.tables).get("Kernels")
        if kernels is None or kernels.empty:
            return None, None
        delta = kernels["Δ Total Time (ns)"]
        up = kernels.loc[delta.idxmax()] if (delta > 0).any() else None
        down = kernels.loc[delta.idxmin()] if (delta < 0).any() else None
        return up, down

    def figures(self) -> list[dict[str, Any]]:
        """Every headline figure with its key and unit, for CI (times in ns)."""
        out = []
        h = self.headline
        for i, row in enumerate(h.itertuples(index=False)):
            out.append(
                {
                    "key": h.attrs["keys"][i],
                    "figure": str(row[0]).strip(),
                    "unit": "ns",
                    "a": _num(row[1]),
                    "b": _num(row[2]),
                    "delta": _num(row[3]),
                    "delta_pct": _num(row[4]),
                }
            )
        return out


def _num(v: Any) -> Any:
    """A JSON number: whole ns as int, None where a side lacks the figure."""
    if v is None or pd.isna(v):
        return None
    v = v.item() if hasattr(v, "item") else v
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _row(label: str, a: float | None, b: float | None) -> list[Any]:
    a_ = math.nan if a is None else a
    b_ = math.nan if b is None else b
    delta = b_ - a_
    pct = delta / a_ * 100 if a_ and not math.isnan(a_) else math.nan
    return [label, a_, b_, delta, pct]


def device_pairs(a: Side, b: Side) -> list[tuple[DeviceTime | None, DeviceTime | None]]:
    """The devices of A and B side by side: by id; where both have as many devices but other ids (the
    traces of two ranks), in id order."""
    da, db = {d.device: d for d in a.devices}, {d.device: d for d in b.devices}
    if set(da) != set(db) and len(da) == len(db):
        return list(zip(a.devices, b.devices, strict=True))
    return [(da.get(dev), db.get(dev)) for dev in sorted(set(da) | set(db))]


def headline(a: Side, b: Side) -> pd.DataFrame:
    rows, keys = [], []

    def add(key: str, label: str, va: float | None, vb: float | None) -> None:
        keys.append(key)
        rows.append(_row(label, va, vb))

    if a.devices or b.devices:
        add("gpu_time", "GPU time, all devices", a.kernel_ns, b.kernel_ns)
        for dev_a, dev_b in device_pairs(a, b):
            va = dev_a.kernel_ns if dev_a is not None else None
            vb = dev_b.kernel_ns if dev_b is not None else None
            ids = [d.device for d in (dev_a, dev_b) if d is not None]
            key = "device" + ("_".join(map(str, ids)) if len(set(ids)) > 1 else str(ids[0]))
            add(f"gpu_time.{key}", "GPU time, device " + " → ".join(map(str, dict.fromkeys(ids))), va, vb)
    add("wall_span", "wall span", a.span_ns, b.span_ns)
    if a.iterations.count or b.iterations.count:
        add("iteration_mean", "iteration time, mean",
            round(float(a.iterations.durations.mean())) if a.iterations.count else None,
            round(float(b.iterations.durations.mean())) if b.iterations.count else None)  # fmt: skip
    if a.devices or b.devices:
        add("gpu_busy", "GPU busy, all devices", a.total("busy_ns"), b.total("busy_ns"))
        for key, label in SPLIT:
            va, vb = a.total(key), b.total(key)
            if key == "other" and not va and not vb:
                continue
            add(key, f"  {label}", va, vb)
    df = pd.DataFrame(rows, columns=HEADLINE_COLUMNS)
    df.attrs["keys"] = keys
    df.attrs["digits"] = {"Δ (%)": 1}
    df.attrs["priority"] = HEADLINE_COLUMNS  # short of room, Δ (%) goes first
    return df


def _totals(names: pd.Series, durations: np.ndarray) -> pd.DataFrame:
    g = pd.DataFrame({"name": names.to_numpy(dtype=object), "d": durations}).groupby("name", sort=False)["d"]
    agg = g.agg(["size", "sum"]).reset_index()
    return pd.DataFrame({"name": agg["name"], "count": agg["size"].astype(np.int64),
                         "total_ns": agg["sum"].astype(np.int64)})  # fmt: skip


def _changes(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """diff_totals of two per-name tables; among equal changes (the unchanged rows) the largest first."""
    d = diff_totals(a, b)
    size = np.maximum(d["Total Time A (ns)"].to_numpy(), d["Total Time B (ns)"].to_numpy())
    order = np.lexsort((d["Name"].to_numpy(dtype=str), -size, -np.abs(d["Δ Total Time (ns)"].to_numpy())))
    return d.iloc[order].reset_index(drop=True)


def _event_totals(side: Side, kinds: tuple[str, ...]) -> pd.DataFrame:
    ev = side.events
    if ev is None:
        return _totals(pd.Series([], dtype=object), np.empty(0, np.int64))
    ev = ev[ev["kind"].isin(kinds).to_numpy()]
    return _totals(ev["name"].astype(str), (ev["end"] - ev["start"]).to_numpy())


def _range_totals(trace: Trace, windows: pd.DataFrame | None, by: str) -> tuple[pd.DataFrame, bool]:
    """The ranges' totals by their grouped names, and whether any name carries PyTorch's fields (so the
    grouping changed them)."""
    r = all_ranges(trace, columns=["name", "domain", "start_ns", "duration_ns", "global_tid"])
    if windows is not None:
        r = r[in_windows(pid_of(r["global_tid"].to_numpy()), r["start_ns"].to_numpy(), windows)]
    names = tagged(r).astype(object)
    return _totals(group_names(names, by=by), r["duration_ns"].to_numpy()), has_fields(names)


def _api_totals(trace: Trace, windows: pd.DataFrame | None) -> pd.DataFrame:
    calls = runtime_calls(trace)
    names = calls.attrs["names"]
    if windows is not None:
        calls = calls[in_windows(pid_of(calls["global_tid"].to_numpy()), calls["start"].to_numpy(), windows)]
    return _totals(calls["name_id"].map(names).fillna("?"), (calls["end"] - calls["start"]).to_numpy())


def _op_totals(trace: Trace, windows: pd.DataFrame | None) -> pd.DataFrame:
    ops = trace.frame("cpu_ops", ["name_id", "start", "end", "global_tid"])
    if windows is not None:
        ops = ops[in_windows(pid_of(ops["global_tid"].to_numpy()), ops["start"].to_numpy(), windows)]
    names = trace.strings(ops["name_id"].unique())
    return _totals(ops["name_id"].map(names), (ops["end"] - ops["start"]).to_numpy())


def diff_exports(
    trace_a: Trace,
    trace_b: Trace,
    *,
    labels: tuple[str, str] = ("A", "B"),
    iteration_range: str | None = None,
    iteration: int | None = None,
    warmup: int = 0,
    by: str = "op",
) -> ExportDiff:
    """B against A: the headline, comparability, verdict and per-name tables (module docstring)."""
    opts = {"iteration_range": iteration_range, "iteration": iteration, "warmup": warmup}
    a = summarise(trace_a, labels[0], **opts)  # type: ignore[arg-type]
    b = summarise(trace_b, labels[1], **opts)  # type: ignore[arg-type]
    comp = comparability(a, b)
    v = verdict(a, b, comp)
    wa, wb = a.windows, b.windows
    tables: list[tuple[str, pd.DataFrame]] = []
    grouping = ""  # how the NVTX names were grouped, where that changed them
    if a.events is not None or b.events is not None:
        tables.append(("Kernels", _changes(_event_totals(a, ("kernel",)), _event_totals(b, ("kernel",)))))
        mem = _changes(_event_totals(a, ("memcpy", "memset")), _event_totals(b, ("memcpy", "memset")))
        if len(mem):
            tables.append(("Memory copies and sets", mem))
    if trace_a.has("nvtx") or trace_b.has("nvtx"):
        empty = (_totals(pd.Series([], dtype=object), np.empty(0, np.int64)), False)
        ra, fa = _range_totals(trace_a, wa, by) if trace_a.has("nvtx") else empty
        rb, fb = _range_totals(trace_b, wb, by) if trace_b.has("nvtx") else empty
        tables.append(("NVTX ranges", _changes(ra, rb)))
        grouping = "".join(grouping_notes(fa or fb, by))
    for title, frame, fn in (("CUDA API", "runtime", _api_totals), ("CPU operators", "cpu_ops", _op_totals)):
        if trace_a.has(frame) or trace_b.has(frame):
            empty = _totals(pd.Series([], dtype=object), np.empty(0, np.int64))
            ta = fn(trace_a, wa) if trace_a.has(frame) else empty
            tb = fn(trace_b, wb) if trace_b.has(frame) else empty
            tables.append((title, _changes(ta, tb)))
    notes = list(dict.fromkeys([*trace_a.notes, *trace_b.notes]))
    if comp.other_models:
        models = " → ".join(", ".join(m) for m in comp.models)
        notes.append(f"A and B ran on other GPUs ({models}): their times differ by that too")
    said = {side: open_ranges_said(t) for side, t in (("A", trace_a), ("B", trace_b))}
    notes += [f"{side}: {line}" for side, line in said.items() if line]
    for s in (a, b):
        s.events = None  # the tables are built: let the events go
    return ExportDiff(a, b, headline(a, b), comp, v, tables, grouping, iteration, notes)
