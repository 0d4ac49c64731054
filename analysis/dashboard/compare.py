"""Panel 6: two runs side by side, per phase and (when both have kernels) per kernel."""

from __future__ import annotations

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.phases import from_steps
from analysis.dashboard.runs import ALTERED, short_id
from analysis.dashboard.style import (
    KERNEL_COLOR,
    MS,
    OOM_COLOR,
    PHASE_ORDER,
    grouped_bars,
    hover,
    ns_ms,
    phase_color,
    plain,
    plain_short,
)
from workloads.names import MEASURED_STATUSES, PROGRAM_MODE

TOP_DIFFS = 15
# what else sets a run's phase times (a run's columns, and how a difference is said)
SHAPE = {"batch_size": "batch size", "context_length": "context length", "new_tokens": "new tokens",
         "world_size": "ranks", "attention": "attention", ALTERED: "step slowed by"}  # fmt: skip
SETTING = {"model": "model", "mode": "mode", "device": "device", "precision": "precision",
           "compile": "compile"}  # fmt: skip
# the same shape and profiler first: a run under nsys is slower by its overhead, a larger batch by its work,
# and either would read as a change
MATCH_KEYS = (
    [*SETTING, *SHAPE, "profiler"],
    [*SETTING, *SHAPE],
    ["model", "mode", "device", "precision", "compile", "profiler"],
    ["model", "mode", "device", "precision", "compile"],
    ["model", "mode", "profiler"],
    ["model", "mode"],
    ["mode"],
)


def pick_pair(runs: pd.DataFrame) -> tuple[str, str] | None:
    """Default pair: the newest successful run, against the newest earlier one most like it; runs of
    `profile -- CMD` (programs the harness does not time: no phase) are not compared."""
    ok = runs[runs["status"].isin(MEASURED_STATUSES)] if not runs.empty else runs
    if "mode" in ok:
        ok = ok[ok["mode"] != PROGRAM_MODE]
    if len(ok) < 2:
        return None
    ok = _comparable(ok)
    newest = ok.iloc[-1]
    earlier = ok.iloc[:-1]
    for keys in MATCH_KEYS:
        keys = [k for k in keys if k in ok]
        same = earlier[(earlier[keys] == newest[keys]).all(axis=1)]
        if not same.empty:
            return str(same.iloc[-1]["run_id"]), str(newest["run_id"])
    return str(earlier.iloc[-1]["run_id"]), str(newest["run_id"])


MISSING = "—"  # a value a run does not have, alike in every run (None == None is False in pandas)


def _comparable(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with missing values made comparable: a run of one process has no world size (1), and two
    missing values are alike (NaN == NaN is False)."""
    out = runs.copy()
    if "world_size" in out:
        out["world_size"] = out["world_size"].fillna(1)
    return out.astype(object).where(out.notna(), MISSING)


def setup_differences(runs: pd.DataFrame, a: str, b: str) -> list[str]:
    """How runs `a` and `b` differ in what sets their phase times, besides the profiler (`batch size 4 vs
    1`)."""
    rows = _comparable(runs).set_index("run_id")
    ra, rb = rows.loc[a], rows.loc[b]
    said = {**SETTING, **SHAPE}
    return [f"{said[k]} {_value(ra[k])} vs {_value(rb[k])}" for k in said if k in rows and ra[k] != rb[k]]


def _value(v: object) -> str:
    """A column's value as said: a whole number without its `.0` (a float column's), a missing one `—`,
    an empty one (nothing slowed the step) `nothing`."""
    if isinstance(v, str) and not v:
        return "nothing"
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def phase_diff(runs: pd.DataFrame, a: str, b: str, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """phase, a_ns, b_ns, diff_ns (b − a), diff_pct, for the phases both runs measured (a phase the runs
    have no column for, a run across ranks' all-reduce, from their measured `steps` where given)."""
    ra = runs.set_index("run_id").loc[a]
    rb = runs.set_index("run_id").loc[b]
    rows = []
    for phase in PHASE_ORDER:
        col = f"{phase}_mean_ns"
        if col in runs:
            va, vb = ra.get(col), rb.get(col)
        elif steps is not None:
            va, vb = (from_steps(steps, r, phase)[0] for r in (a, b))
        else:
            continue
        if va is not None and vb is not None and pd.notna(va) and pd.notna(vb):
            va, vb = float(va), float(vb)
            rows.append(
                {"phase": phase, "a_ns": va, "b_ns": vb, "diff_ns": vb - va, "diff_pct": (vb - va) / va * 100}
            )
    return pd.DataFrame(rows, columns=["phase", "a_ns", "b_ns", "diff_ns", "diff_pct"])


def kernel_diff(ka: pd.DataFrame, kb: pd.DataFrame, n: int = TOP_DIFFS) -> pd.DataFrame:
    """Per kernel name: total GPU time in each run and the difference; the n largest |differences|."""
    ta = ka.groupby("Name")["Total Time (ns)"].sum()
    tb = kb.groupby("Name")["Total Time (ns)"].sum()
    both = pd.concat({"a_ns": ta, "b_ns": tb}, axis=1).fillna(0.0)
    both["diff_ns"] = both["b_ns"] - both["a_ns"]
    both = both.reindex(both["diff_ns"].abs().sort_values(ascending=False, kind="stable").index).head(n)
    return both.rename_axis("Name").reset_index()


def compare_figure(phases: pd.DataFrame, kernels: pd.DataFrame | None, a_label: str, b_label: str):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    cols = 2 if kernels is not None and not kernels.empty else 1
    titles = ["mean time per phase"] + (["largest per-kernel differences (B − A)"] if cols == 2 else [])
    fig = make_subplots(rows=1, cols=cols, subplot_titles=titles, horizontal_spacing=0.25)
    colors = [phase_color(p, i) for i, p in enumerate(phases["phase"])]
    for label, col, pattern in ((a_label, "a_ns", ""), (b_label, "b_ns", "/")):
        fig.add_trace(
            go.Bar(
                name=label,
                x=phases["phase"],
                y=phases[col] / MS,
                marker={"color": colors, "pattern": {"shape": pattern}},
                customdata=phases[[col, "diff_ns", "diff_pct"]].to_numpy(),
                hovertemplate=hover(
                    f"%{{x}} · {plain(label)}",  # a run id: outside text in the panel's own template
                    ns_ms("mean", "y", "customdata[0]"),
                    "B − A: %{customdata[1]:+,.0f} ns (%{customdata[2]:+.2f} %)",
                ),
            ),
            row=1,
            col=1,
        )
    fig.update_yaxes(title_text="mean time per step (ms)", row=1, col=1)
    fig.update_xaxes(title_text="phase", row=1, col=1)
    if cols == 2:
        k = kernels.iloc[::-1]
        fig.add_trace(
            go.Bar(
                name="kernel B − A",
                orientation="h",
                y=[plain_short(s, 50) for s in k["Name"]],
                x=k["diff_ns"] / MS,
                marker_color=[OOM_COLOR if d > 0 else KERNEL_COLOR for d in k["diff_ns"]],
                customdata=pd.DataFrame(
                    {
                        "name": k["Name"].map(lambda s: plain_short(s, 300)),
                        "a": k["a_ns"],
                        "b": k["b_ns"],
                        "d": k["diff_ns"],
                    }
                ).to_numpy(),
                hovertemplate=hover(
                    "%{customdata[0]}",
                    "A total: %{customdata[1]:,.0f} ns",
                    "B total: %{customdata[2]:,.0f} ns",
                    ns_ms("B − A", "x", "customdata[3]"),
                ),
            ),
            row=1,
            col=2,
        )
        fig.update_xaxes(title_text="B − A total GPU time (ms)", row=1, col=2)
    return grouped_bars(fig, 440, "run")


def _made_with(runs: pd.DataFrame, run_id: str) -> str:
    """`without a profiler`, `under nsys (light)`, `under torch`."""
    row = runs[runs["run_id"] == run_id].iloc[0]
    profiler = str(row.get("profiler") or "none")
    if profiler == "none":
        return "without a profiler"
    mode = row.get("nsys_mode")
    return f"under {profiler}" + (f" ({mode})" if isinstance(mode, str) and mode else "")


def _profiled(made: str) -> str:
    """What a run's legend entry adds: nothing for a run without a profiler, `(under nsys)` otherwise."""
    return "" if made == "without a profiler" else f" ({made})"


def compare_panel(data: DashboardData) -> Panel:
    pair = data.compare or pick_pair(data.runs)
    if pair is None:
        return Panel(
            missing="fewer than two successful runs to compare: run `harness run tiny --device cpu` twice"
        )
    a, b = pair
    runs = data.runs if data.compare_runs is None else data.compare_runs
    steps = data.steps if data.compare_steps is None else data.compare_steps
    absent = [r for r in pair if r not in set(runs["run_id"])]
    if absent:
        return Panel(
            missing=f"run {absent[0]} is not among the selected runs: check the ids with `harness runs`"
        )
    phases = phase_diff(runs, a, b, steps)
    if phases.empty:
        return Panel(missing=f"runs {a} and {b} have no phase in common to compare")
    ka, kb = data.compare_kernels
    status = runs.set_index("run_id")["status"] if "status" in runs else pd.Series(dtype=object)
    degraded = [r for r in pair if status.get(r) == "degraded"]
    if degraded:  # kernel times are its capture's, which failed its health checks
        ka = kb = None
    kernels = (
        kernel_diff(ka, kb) if ka is not None and kb is not None and not ka.empty and not kb.empty else None
    )
    notes = [f"A = {a}, B = {b}; pick others with --compare A,B."]
    if degraded:
        notes.append(
            f"Per-kernel differences left out: {' and '.join(degraded)} "
            f"{'is' if len(degraded) == 1 else 'are'} degraded (a capture that failed its health checks): "
            "step times stand, kernel times do not."
        )
    # a run named with --compare that stopped short (out of memory, failed, interrupted): its phase times
    # are those of the steps it measured before, said as diff says it (the default pair has no such run)
    for side, r in (("B", b), ("A", a)):
        if r in status and status[r] not in MEASURED_STATUSES:
            notes.insert(
                0,
                f"Warning: {side} ({r}) ended {status[r]}: its times are those of the steps it measured "
                "before it stopped.",
            )
    made = {r: _made_with(runs, r) for r in pair}
    differ = setup_differences(runs, a, b)
    if differ:
        notes.insert(
            0,
            f"Warning: A and B are not the same configuration ({', '.join(differ)}): the difference holds "
            "that as well as any real change.",
        )
    if made[a] != made[b]:
        notes.insert(
            0,
            f"Warning: A ran {made[a]} and B {made[b]}: the difference holds the profiler's overhead as "
            "well as any real change; compare runs made the same way (`harness overhead` measures the "
            "overhead itself).",
        )
    if kernels is None and not degraded:
        notes.append(
            "Per-kernel differences need both runs profiled with kernels (`harness run … --nsys` on CUDA)."
        )
    a_label, b_label = (f"{side} {short_id(r)}" + _profiled(made[r]) for side, r in (("A", a), ("B", b)))
    return Panel(
        figure=compare_figure(phases, kernels, a_label, b_label),
        title=f"Run comparison: {a} vs {b}",
        notes=notes,
    )
