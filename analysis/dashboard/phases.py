"""Panels 1 and 2: mean phase time per model size and setting; per-step distributions with warm-up."""

from __future__ import annotations

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.runs import (
    latest_per_config,
    model_order,
    profiler_label,
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
    ns_ms,
    ordered_phases,
    phase_color,
)

NO_RUNS = "no runs in the results database: run `harness sweep --models tiny,small --device cpu --steps 3`"
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


def phase_means(runs: pd.DataFrame, modes: tuple[str, ...] = TRAIN_MODES) -> pd.DataFrame:
    """One row per configuration and phase of runs in `modes`: model, setting, phase, mean_ns, std_ns,
    status, run_id.

    Failed configurations (OOM, error) get one row with phase None, so they can be drawn as such.
    """
    cols = ["model", "setting", "phase", "mean_ns", "std_ns", "status", "run_id"]
    runs = _modes(runs, modes)
    if runs.empty:
        return pd.DataFrame(columns=cols)
    latest = with_labels(latest_per_config(runs))
    rows = []
    for r in latest.to_dict("records"):
        if r["status"] != "ok":
            rows.append({**_key(r), "phase": None, "mean_ns": None, "std_ns": None})
            continue
        for phase in PHASE_ORDER:
            mean = r.get(f"{phase}_mean_ns")
            if mean is None or pd.isna(mean):
                continue
            std = r.get(f"{phase}_std_ns")
            rows.append({**_key(r), "phase": phase, "mean_ns": float(mean), "std_ns": _num(std)})
    return pd.DataFrame(rows, columns=cols)


def _key(r: dict) -> dict:
    return {"model": r["model"], "setting": r["setting"], "status": r["status"], "run_id": r["run_id"]}


def _num(v: object) -> float:
    return float("nan") if v is None or pd.isna(v) else float(v)  # type: ignore[arg-type]


def phase_bars_figure(table: pd.DataFrame, models: list[str] | None = None):
    """Grouped bars of mean phase time (ms) with std error bars; one facet per setting; OOM marked.

    Each facet has its own y-axis (on a CPU, bf16 can be a hundred times slower than fp32), and a button
    switches every axis to a log scale.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    settings = setting_order(table["setting"])
    models = models or list(dict.fromkeys(table["model"]))
    fig = make_subplots(rows=1, cols=len(settings), subplot_titles=settings, horizontal_spacing=0.06)
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
                    legendgroup=phase,
                    showlegend=phase not in shown,
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
            shown.add(phase)
        failed = part[part["phase"].isna()]
        if not failed.empty:
            fig.add_trace(
                go.Scatter(
                    name="OOM / failed (no time)",
                    legendgroup="failed",
                    showlegend="failed" not in shown,
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
            shown.add("failed")
        fig.update_xaxes(categoryorder="array", categoryarray=models, title_text="model", row=1, col=col)
    fig.update_yaxes(title_text="mean time per step (ms)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(rangemode="tozero")
    axes = [k for k in fig.layout if k.startswith("yaxis")]
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
                "buttons": [
                    {"label": scale, "method": "relayout", "args": [{f"{a}.type": scale for a in axes}]}
                    for scale in ("linear", "log")
                ],
            }
        ],
    )
    return fig


def _bars_panel(data: DashboardData, modes: tuple[str, ...], missing: str) -> Panel:
    table = phase_means(data.runs, modes)
    if table.empty:
        return Panel(missing=missing)
    notes = ["Each setting has its own y-axis: compare heights within a facet, or switch to the log scale."]
    if "profiler" in data.runs and (data.runs["profiler"] != "none").any():
        notes.append("Per configuration the newest run without a profiler is shown when there is one.")
    return Panel(figure=phase_bars_figure(table, model_order(data.runs)), notes=notes)


def phase_bars_panel(data: DashboardData) -> Panel:
    """Training runs only: forward, backward, optimizer."""
    return _bars_panel(data, TRAIN_MODES, NO_RUNS)


def inference_bars_panel(data: DashboardData) -> Panel:
    """Generate (prefill, decode) and forward-only runs, kept apart from training."""
    return _bars_panel(data, INFERENCE_MODES, NO_INFERENCE)


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


def distribution_figure(table: pd.DataFrame):
    """One facet per phase, each with its own y-axis: a box of measured steps per run (hollow for a run
    under a profiler), warm-up steps as crosses beside it. Prefill and decode get a row of their own."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    present = ordered_phases(table["phase"])
    # training phases on one row, generate's prefill and decode on another: the runs differ too
    groups = ([p for p in present if p not in GENERATE], [p for p in present if p in GENERATE])
    rows = [g for g in groups if g]
    cols = max(len(r) for r in rows)
    cells = [(r, c, phase) for r, row in enumerate(rows, start=1) for c, phase in enumerate(row, start=1)]
    titles = [f"{p} (own y-axis)" if p else "" for row in rows for p in row + [""] * (cols - len(row))]
    profiled = table["profiled"].fillna("").astype(bool) if "profiled" in table else False
    fig = make_subplots(
        rows=len(rows),
        cols=cols,
        subplot_titles=titles,
        horizontal_spacing=0.07,
        vertical_spacing=0.22,  # room for the rotated run labels of the row above
    )
    shown: set[str] = set()
    for row, col, phase in cells:
        in_phase = table["phase"] == phase
        labels = list(dict.fromkeys(table.loc[in_phase, "label"]))
        color = phase_color(phase)
        for under, part in ((False, table[in_phase & ~profiled]), (True, table[in_phase & profiled])):
            measured = part[~part["warmup"].astype(bool)]
            if measured.empty:
                continue
            fig.add_trace(
                go.Box(
                    name=f"{phase} · under a profiler" if under else phase,
                    legendgroup=f"{phase}{under}",
                    x=measured["label"],
                    y=measured["duration_ns"] / MS,
                    marker={"color": color, "symbol": "diamond-open" if under else "circle"},
                    fillcolor="rgba(255,255,255,0)" if under else None,
                    boxpoints="all",
                    jitter=0.3,
                    pointpos=0,
                    customdata=measured[["duration_ns", "step"]].to_numpy(),
                    hovertemplate=hover(
                        f"%{{x}} · {phase}", "step %{customdata[1]}", ns_ms("time", "y", "customdata[0]")
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
                    legendgroup="warmup",
                    showlegend="warmup" not in shown,
                    x=warm["label"],
                    y=warm["duration_ns"] / MS,
                    mode="markers",
                    marker={"symbol": "x-thin-open", "size": 10, "color": color, "line": {"width": 2}},
                    customdata=warm[["duration_ns", "step"]].to_numpy(),
                    hovertemplate=hover(
                        f"%{{x}} · {phase} (warm-up)",
                        "step %{customdata[1]}",
                        ns_ms("time", "y", "customdata[0]"),
                    ),
                ),
                row=row,
                col=col,
            )
            shown.add("warmup")
        fig.update_xaxes(
            categoryorder="array", categoryarray=labels, tickangle=-35, dtick=1, row=row, col=col
        )  # every run's label, none thinned out
        fig.update_yaxes(title_text=f"{phase} per step (ms)", row=row, col=col)
    fig.update_layout(template=TEMPLATE, height=560 * len(rows), legend_title_text="phase", margin={"t": 60})
    return fig


def distribution_panel(data: DashboardData) -> Panel:
    table = distribution_table(data.steps, data.runs)
    if table.empty:
        return Panel(missing="no step timings recorded: run `harness run tiny --device cpu`")
    notes = [
        "Each phase has its own y-axis: compare runs within a phase, not heights across phases.",
    ]
    if table["profiled"].astype(bool).any():
        notes.append(
            "Hollow boxes with diamonds, and labels ending in the profiler (nsys light), are runs made under "
            "a profiler; their times include its overhead."
        )
    if not table["warmup"].astype(bool).any():
        notes.append("No warm-up steps recorded for these runs.")
    if data.runs["run_id"].nunique() > MAX_DISTRIBUTION_RUNS:
        notes.append(f"The newest {MAX_DISTRIBUTION_RUNS} runs; pick others with --runs or --last.")
    return Panel(figure=distribution_figure(table), notes=notes)
