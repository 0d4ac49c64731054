"""Panels 1 and 2: mean phase time per model size and setting; per-step distributions with warm-up."""

from __future__ import annotations

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.runs import latest_per_config, model_order, setting_order, with_labels
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
MAX_DISTRIBUTION_RUNS = 12


def phase_means(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration and phase: model, setting, phase, mean_ns, std_ns, status, run_id.

    Failed configurations (OOM, error) get one row with phase None, so they can be drawn as such.
    """
    cols = ["model", "setting", "phase", "mean_ns", "std_ns", "status", "run_id"]
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
    """Grouped bars of mean phase time (ms) with std error bars; one facet per setting; OOM marked."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    settings = setting_order(table["setting"])
    models = models or list(dict.fromkeys(table["model"]))
    fig = make_subplots(
        rows=1, cols=len(settings), shared_yaxes=True, subplot_titles=settings, horizontal_spacing=0.04
    )
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
    fig.update_yaxes(title_text="mean time per step (ms)", row=1, col=1)
    fig.update_layout(
        template=TEMPLATE, barmode="group", legend_title_text="phase", height=460, margin={"t": 60}
    )
    return fig


def phase_bars_panel(data: DashboardData) -> Panel:
    table = phase_means(data.runs)
    if table.empty:
        return Panel(missing=NO_RUNS)
    notes = []
    if "profiler" in data.runs and (data.runs["profiler"] != "none").any():
        notes.append("Per configuration the newest run without a profiler is shown when there is one.")
    return Panel(figure=phase_bars_figure(table, model_order(data.runs)), notes=notes)


def distribution_table(
    steps: pd.DataFrame, runs: pd.DataFrame, limit: int = MAX_DISTRIBUTION_RUNS
) -> pd.DataFrame:
    """Step timings of the newest `limit` runs, labelled: label, run_id, step, phase, duration_ns, warmup."""
    if steps.empty or runs.empty:
        return pd.DataFrame(columns=["label", "run_id", "step", "phase", "duration_ns", "warmup"])
    labelled = with_labels(runs)
    labelled = labelled[labelled["run_id"].isin(set(steps["run_id"]))].tail(limit)
    out = steps.merge(labelled[["run_id", "label"]], on="run_id", how="inner")
    order = {label: i for i, label in enumerate(labelled["label"])}
    out = out.assign(_o=out["label"].map(order)).sort_values(["_o", "step"], kind="stable").drop(columns="_o")
    return out[["label", "run_id", "step", "phase", "duration_ns", "warmup"]].reset_index(drop=True)


def distribution_figure(table: pd.DataFrame):
    """One facet per phase: a box of measured steps per run, warm-up steps as crosses beside it."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    phases = ordered_phases(table["phase"])
    labels = list(dict.fromkeys(table["label"]))
    fig = make_subplots(rows=1, cols=len(phases), subplot_titles=phases, horizontal_spacing=0.05)
    warm_shown = False
    for col, phase in enumerate(phases, start=1):
        p = table[table["phase"] == phase]
        measured = p[~p["warmup"].astype(bool)]
        warm = p[p["warmup"].astype(bool)]
        color = phase_color(phase)
        fig.add_trace(
            go.Box(
                name=phase,
                legendgroup=phase,
                x=measured["label"],
                y=measured["duration_ns"] / MS,
                marker_color=color,
                boxpoints="all",
                jitter=0.3,
                pointpos=0,
                customdata=measured[["duration_ns", "step"]].to_numpy(),
                hovertemplate=hover(
                    f"%{{x}} · {phase}", "step %{customdata[1]}", ns_ms("time", "y", "customdata[0]")
                ),
            ),
            row=1,
            col=col,
        )
        if not warm.empty:
            fig.add_trace(
                go.Scatter(
                    name="warm-up step",
                    legendgroup="warmup",
                    showlegend=not warm_shown,
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
                row=1,
                col=col,
            )
            warm_shown = True
        fig.update_xaxes(categoryorder="array", categoryarray=labels, tickangle=-30, row=1, col=col)
    fig.update_yaxes(title_text="time per step (ms)", row=1, col=1)
    fig.update_layout(template=TEMPLATE, height=480, legend_title_text="phase", margin={"t": 60})
    return fig


def distribution_panel(data: DashboardData) -> Panel:
    table = distribution_table(data.steps, data.runs)
    if table.empty:
        return Panel(missing="no step timings recorded: run `harness run tiny --device cpu`")
    notes = []
    if not table["warmup"].astype(bool).any():
        notes.append("No warm-up steps recorded for these runs.")
    if data.runs["run_id"].nunique() > MAX_DISTRIBUTION_RUNS:
        notes.append(f"The newest {MAX_DISTRIBUTION_RUNS} runs; pick others with --runs or --last.")
    return Panel(figure=distribution_figure(table), notes=notes)
