"""Panels 1 and 2: mean phase time per model size and setting; per-step distributions with warm-up."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.runs import (
    latest_per_config,
    model_order,
    profiler_label,
    programs_only,
    setting_order,
    with_labels,
)
from analysis.dashboard.style import (
    MS,
    OOM_COLOR,
    PHASE_COLORS,
    PHASE_ORDER,
    TEMPLATE,
    hover,
    legend_once,
    ns_ms,
    ordered_phases,
    phase_color,
)
from analysis.runs.steady import PhaseStats
from workloads.names import MEASURED_STATUSES

NO_RUNS = "no runs in the results database: run `harness sweep --models tiny,small --device cpu --steps 3`"
NO_TIMED = (
    "no timed runs: runs of `profile -- CMD` time no phase (their NVTX ranges are in the nvtx panel); run "
    "`harness sweep --models tiny,small --device cpu --steps 3`"
)
NO_TRAINING = (
    "no training runs (those here are generate or forward-only runs: the prefill / decode panel draws "
    "them): run `harness sweep --models tiny,small --device cpu --steps 3`"
)
NO_INFERENCE = (
    "no generate or forward-only runs: run `harness run tiny --mode generate --device cpu` "
    "(or `harness sweep --mode generate`)"
)
MAX_DISTRIBUTION_RUNS = 12
TRAIN_MODES = ("train",)
GENERATE = ("prefill", "decode")
INFERENCE_MODES = ("generate", "forward")


def _modes(runs: pd.DataFrame, modes: tuple[str, ...]) -> pd.DataFrame:
    """The runs of these modes; runs of a store without a mode column count as training runs."""
    if "mode" not in runs:
        return runs if "train" in modes else runs.iloc[0:0]
    return runs[runs["mode"].fillna("train").isin(modes)]


def phase_means(
    runs: pd.DataFrame, modes: tuple[str, ...] = TRAIN_MODES, steps: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per configuration and phase of runs in `modes`: model, setting, phase, mean_ns, std_ns,
    status, run_id. A phase the runs have no column for (a run across ranks' all-reduce) is taken from
    their measured `steps`, where given.

    Failed configurations (OOM, error) get one row with phase None, so they can be drawn as such.
    """
    cols = ["model", "setting", "phase", "mean_ns", "std_ns", "status", "run_id"]
    runs = _modes(runs, modes)
    if runs.empty:
        return pd.DataFrame(columns=cols)
    latest = with_labels(latest_per_config(runs))
    rows = []
    for r in latest.to_dict("records"):
        if r["status"] not in MEASURED_STATUSES:
            rows.append({**_key(r), "phase": None, "mean_ns": None, "std_ns": None})
            continue
        for phase in PHASE_ORDER:
            mean, std = r.get(f"{phase}_mean_ns"), r.get(f"{phase}_std_ns")
            if f"{phase}_mean_ns" not in runs and steps is not None:
                mean, std = from_steps(steps, r["run_id"], phase)
            if mean is None or pd.isna(mean):
                continue
            rows.append({**_key(r), "phase": phase, "mean_ns": float(mean), "std_ns": _num(std)})
    return pd.DataFrame(rows, columns=cols)


def from_steps(steps: pd.DataFrame, run_id: str, phase: str) -> tuple[float | None, float | None]:
    """A phase's mean and std over a run's measured steps (every rank's), as the stored columns are."""
    mine = steps[(steps["run_id"] == run_id) & (steps["phase"] == phase) & ~steps["warmup"].astype(bool)]
    if mine.empty:
        return None, None
    stats = PhaseStats.of(phase, [int(d) for d in mine["duration_ns"]])
    return stats.mean_ns, stats.std_ns


def _key(r: dict) -> dict:
    return {"model": r["model"], "setting": r["setting"], "status": r["status"], "run_id": r["run_id"]}


def _num(v: object) -> float:
    return float("nan") if v is None or pd.isna(v) else float(v)  # type: ignore[arg-type]


def phase_bars_figure(table: pd.DataFrame, models: list[str] | None = None, *, log: bool = False):
    """Grouped bars of mean phase time (ms) with std error bars; one facet per setting; OOM marked.

    Each facet has its own y-axis (on a CPU, bf16 can be a hundred times slower than fp32), and a button
    switches every axis between linear and log scales; `log` starts on the log scale (prefill and decode:
    one short prompt pass beside many decode steps, which a linear axis would flatten).
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    settings = setting_order(table["setting"])
    models = models or list(dict.fromkeys(table["model"]))
    # plotly takes a gap of at most 1 / (facets - 1) of the width: many settings get a narrower one
    gap = min(0.06, 0.5 / max(len(settings) - 1, 1))
    fig = make_subplots(rows=1, cols=len(settings), subplot_titles=settings, horizontal_spacing=gap)
    phases = ordered_phases(table["phase"].dropna())
    shown: set[str] = set()
    for col, setting in enumerate(settings, start=1):
        part = table[table["setting"] == setting]
        for phase in phases:
            p = part[part["phase"] == phase]
            if p.empty:
                continue
            fig.add_trace(
                go.Bar(
                    name=phase,
                    **legend_once(shown, phase),
                    x=p["model"],
                    y=p["mean_ns"] / MS,
                    error_y={"type": "data", "array": (p["std_ns"] / MS).fillna(0).tolist(), "visible": True},
                    marker_color=PHASE_COLORS.get(phase, phase_color(phase)),
                    customdata=p[["mean_ns", "std_ns", "run_id"]].to_numpy(),
                    hovertemplate=hover(
                        f"%{{x}} · {setting} · {phase}",
                        ns_ms("mean", "y", "customdata[0]"),
                        "std: %{customdata[1]:,.0f} ns",
                        "run %{customdata[2]}",
                    ),
                ),
                row=1,
                col=col,
            )
        failed = part[part["phase"].isna()]
        if not failed.empty:
            fig.add_trace(
                go.Scatter(
                    name="OOM / failed (no time)",
                    **legend_once(shown, "failed"),
                    x=failed["model"],
                    y=[0] * len(failed),
                    mode="markers+text",
                    text=failed["status"].str.upper(),
                    textposition="top center",
                    textfont={"color": OOM_COLOR},
                    marker={"symbol": "x", "size": 14, "color": OOM_COLOR},
                    customdata=failed[["run_id"]].to_numpy(),
                    hovertemplate=hover(
                        "%{x} · " + setting, "%{text}: no time measured", "run %{customdata[0]}"
                    ),
                ),
                row=1,
                col=col,
            )
        fig.update_xaxes(categoryorder="array", categoryarray=models, title_text="model", row=1, col=col)
    fig.update_yaxes(title_text="mean time per step (ms)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(rangemode="tozero")
    # each facet's y-axis as plotly names it, in facet order (the layout's own keys come in a set's order,
    # which differs from one process to the next)
    axes = [f"yaxis{col if col > 1 else ''}" for col in range(1, len(settings) + 1)]
    # a log axis of bars starts where the range does: from a decade below the smallest bar, so the small
    # bar keeps its height (plotly's autorange would start at it and draw it as nothing)
    values = (table["mean_ns"] / MS)[table["mean_ns"] > 0]
    low = float(np.log10(values.min())) - 1 if len(values) else 0.0
    high = (
        float(np.log10((table["mean_ns"] + table["std_ns"].fillna(0)).max() / MS)) + 0.15
        if len(values)
        else 1.0
    )
    log_axes = {**{f"{a}.type": "log" for a in axes}, **{f"{a}.range": [low, high] for a in axes}}
    linear_axes = {**{f"{a}.type": "linear" for a in axes}, **{f"{a}.autorange": True for a in axes}}
    if log:
        fig.update_yaxes(type="log", rangemode="normal", range=[low, high])
    fig.update_layout(
        template=TEMPLATE,
        barmode="group",
        legend_title_text="phase",
        height=480,
        margin={"t": 90},
        updatemenus=[
            {
                "type": "buttons",
                "direction": "right",
                "x": 1.0,
                "xanchor": "right",
                "y": 1.2,
                "yanchor": "top",
                "showactive": True,
                "active": 1 if log else 0,
                "buttons": [
                    {"label": "linear", "method": "relayout", "args": [linear_axes]},
                    {"label": "log", "method": "relayout", "args": [log_axes]},
                ],
            }
        ],
    )
    return fig


def _bars_panel(data: DashboardData, modes: tuple[str, ...], missing: str, *, log: bool = False) -> Panel:
    table = phase_means(data.runs, modes, data.steps)
    if table.empty:
        if missing == NO_RUNS and data.unmatched:
            return Panel(missing=data.unmatched)
        if missing == NO_RUNS and len(data.runs) and not phase_means(data.runs, INFERENCE_MODES).empty:
            return Panel(missing=NO_TRAINING)
        if missing == NO_RUNS and programs_only(data.runs):
            return Panel(missing=NO_TIMED)
        return Panel(missing=missing)
    notes = ["Each setting has its own y-axis: compare heights within a facet, or switch to the log scale."]
    if log:
        notes = [
            "Log scale: prefill and decode differ by orders of magnitude, and a linear axis would flatten "
            "the smaller to nothing. Each setting has its own y-axis; the buttons switch to linear."
        ]
    if "profiler" in data.runs and (data.runs["profiler"] != "none").any():
        notes.append("Per configuration the newest run without a profiler is shown when there is one.")
    return Panel(figure=phase_bars_figure(table, model_order(data.runs), log=log), notes=notes)


def phase_bars_panel(data: DashboardData) -> Panel:
    """Training runs only: forward, backward, optimizer."""
    return _bars_panel(data, TRAIN_MODES, NO_RUNS)


def inference_bars_panel(data: DashboardData) -> Panel:
    """Generate (prefill, decode) and forward-only runs, kept apart from training."""
    return _bars_panel(data, INFERENCE_MODES, NO_INFERENCE, log=True)


def distribution_table(
    steps: pd.DataFrame, runs: pd.DataFrame, limit: int = MAX_DISTRIBUTION_RUNS
) -> pd.DataFrame:
    """Step timings of the newest `limit` runs, labelled: label, run_id, step, phase, duration_ns, warmup,
    profiled (the profiler's name, "" for none). A profiled run's label ends with its profiler."""
    cols = ["label", "run_id", "step", "phase", "duration_ns", "warmup", "profiled"]
    if steps.empty or runs.empty:
        return pd.DataFrame(columns=cols)
    labelled = with_labels(runs)
    labelled = labelled[labelled["run_id"].isin(set(steps["run_id"]))].tail(limit)
    labelled["profiled"] = [profiler_label(r) for r in labelled.to_dict("records")]
    labelled["label"] = [
        f"{label} · {p}" if p else label
        for label, p in zip(labelled["label"], labelled["profiled"], strict=True)
    ]
    out = steps.merge(labelled[["run_id", "label", "profiled"]], on="run_id", how="inner")
    order = {label: i for i, label in enumerate(labelled["label"])}
    out = out.assign(_o=out["label"].map(order)).sort_values(["_o", "step"], kind="stable").drop(columns="_o")
    return out[cols].reset_index(drop=True)


LABEL_ROW_PX = 30  # height of one run's row: its label never crowds the next at the default size
ROW_GAP_PX = 110  # between rows of facets
MARGIN_PX = 140  # above and below the facets


def distribution_figure(table: pd.DataFrame):
    """One facet per phase, each with its own time axis: a horizontal box of measured steps per run (hollow
    for a run under a profiler), warm-up steps as crosses on the same line. Run labels read across on the
    left, once per row of facets and one line each, so they cannot crowd or overlap however many runs
    there are; the figure grows with them. Prefill and decode get a row of their own."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    present = ordered_phases(table["phase"])
    # training phases on one row, generate's prefill and decode on another: the runs differ too
    groups = ([p for p in present if p not in GENERATE], [p for p in present if p in GENERATE])
    rows = [g for g in groups if g]
    cols = max(len(r) for r in rows)
    row_labels = [list(dict.fromkeys(table.loc[table["phase"].isin(r), "label"])) for r in rows]
    heights = [max(len(labels), 2) * LABEL_ROW_PX + 60 for labels in row_labels]
    cells = [(r, c, phase) for r, row in enumerate(rows, start=1) for c, phase in enumerate(row, start=1)]
    titles = [f"{p} (own time axis)" if p else "" for row in rows for p in row + [""] * (cols - len(row))]
    profiled = table["profiled"].fillna("").astype(bool) if "profiled" in table else False
    gap = ROW_GAP_PX * (len(rows) - 1)  # between rows: the upper axis title, then the lower facets' titles
    fig = make_subplots(
        rows=len(rows),
        cols=cols,
        subplot_titles=titles,
        shared_yaxes=True,  # the run labels once, on the left of each row
        horizontal_spacing=0.04,
        vertical_spacing=ROW_GAP_PX / (sum(heights) + gap) if len(rows) > 1 else 0.0,
        row_heights=[h / sum(heights) for h in heights],
    )
    shown: set[str] = set()
    for row, col, phase in cells:
        in_phase = table["phase"] == phase
        color = phase_color(phase)
        for under, part in ((False, table[in_phase & ~profiled]), (True, table[in_phase & profiled])):
            measured = part[~part["warmup"].astype(bool)]
            if measured.empty:
                continue
            fig.add_trace(
                go.Box(
                    name=f"{phase} · under a profiler" if under else phase,
                    legendgroup=f"{phase}{under}",
                    orientation="h",
                    y=measured["label"],
                    x=measured["duration_ns"] / MS,
                    marker={"color": color, "symbol": "diamond-open" if under else "circle"},
                    fillcolor="rgba(255,255,255,0)" if under else None,
                    boxpoints="all",
                    jitter=0.3,
                    pointpos=0,
                    customdata=measured[["duration_ns", "step"]].to_numpy(),
                    hovertemplate=hover(
                        f"%{{y}} · {phase}", "step %{customdata[1]}", ns_ms("time", "x", "customdata[0]")
                    ),
                ),
                row=row,
                col=col,
            )
        warm = table[in_phase & table["warmup"].astype(bool)]
        if not warm.empty:
            fig.add_trace(
                go.Scatter(
                    name="warm-up step",
                    **legend_once(shown, "warmup"),
                    y=warm["label"],
                    x=warm["duration_ns"] / MS,
                    mode="markers",
                    marker={"symbol": "x-thin-open", "size": 10, "color": color, "line": {"width": 2}},
                    customdata=warm[["duration_ns", "step"]].to_numpy(),
                    hovertemplate=hover(
                        f"%{{y}} · {phase} (warm-up)",
                        "step %{customdata[1]}",
                        ns_ms("time", "x", "customdata[0]"),
                    ),
                ),
                row=row,
                col=col,
            )
        fig.update_xaxes(title_text=f"{phase} per step (ms)", row=row, col=col)
    for row, labels in enumerate(row_labels, start=1):
        # newest run at the top, every label shown, none thinned out or rotated
        fig.update_yaxes(categoryorder="array", categoryarray=labels[::-1], dtick=1, tickangle=0,
                         automargin=True, row=row, col=1)  # fmt: skip
    fig.update_layout(
        template=TEMPLATE,
        height=sum(heights) + gap + MARGIN_PX,
        legend_title_text="phase",
        margin={"t": 60, "b": MARGIN_PX - 60, "l": 10},
        boxmode="overlay",
    )
    return fig


def distribution_panel(data: DashboardData) -> Panel:
    table = distribution_table(data.steps, data.runs)
    if table.empty:
        return Panel(missing="no step timings recorded: run `harness run tiny --device cpu`")
    notes = [
        "Each phase has its own time axis: compare runs within a phase, not lengths across phases.",
    ]
    if table["profiled"].astype(bool).any():
        notes.append(
            "Hollow boxes with diamonds, and labels ending in the profiler (nsys light), are runs made under "
            "a profiler; their times include its overhead."
        )
    if not table["warmup"].astype(bool).any():
        notes.append("No warm-up steps recorded for these runs.")
    with_steps = data.runs["run_id"].isin(set(data.steps["run_id"])).sum()
    if with_steps > MAX_DISTRIBUTION_RUNS:  # a run without step timings has nothing to draw here
        notes.append(
            f"The newest {MAX_DISTRIBUTION_RUNS} of {with_steps} runs with step timings; pick others with "
            "--runs or --last."
        )
    return Panel(figure=distribution_figure(table), notes=notes)
