"""Panel 3: profiler overhead per phase (without vs with nsys), and NVTX-vs-timer agreement."""

from __future__ import annotations

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.runs import with_labels
from analysis.dashboard.style import MS, TEMPLATE, hover, ns_ms, ordered_phases, phase_color
from analysis.overhead import BASELINE, overhead_table

SAME_CONFIG = ["model", "mode", "device", "precision", "compile", "batch_size", "context_length"]
PATTERNS = ("", "/", "x", ".")


def _label(profiler: str, nsys_mode: object) -> str:
    if profiler == "none":
        return BASELINE
    return f"{profiler} {nsys_mode}" if isinstance(nsys_mode, str) and nsys_mode else str(profiler)


def overhead_runs(runs: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The runs to compare and where they come from.

    The newest `harness overhead` experiment; failing that, the newest configuration that has runs both
    without and with a profiler (made separately, so machine drift is not controlled for).
    """
    ok = runs[runs["status"] == "ok"] if not runs.empty else runs
    if ok.empty:
        return ok, ""

    def both(group: pd.DataFrame) -> bool:
        return bool((group["profiler"] == "none").any() and (group["profiler"] != "none").any())

    exp = ok["experiment"].fillna("")
    overhead = ok[exp.str.startswith("overhead-")]
    for name, group in reversed(list(overhead.groupby("experiment", sort=False))):
        if both(group):
            return group, f"experiment {name}"
    keys = [k for k in SAME_CONFIG if k in ok]
    for _, group in reversed(list(ok.groupby(keys, sort=False, dropna=False))):
        if both(group):
            return group, "separate runs of the same configuration (not alternated)"
    return ok.iloc[0:0], ""


def overhead_steps(runs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Measured steps of `runs` labelled by profiler: label, repeat, step, phase, duration_ns."""
    labels = {
        r.run_id: (_label(r.profiler, r.nsys_mode), i) for i, r in enumerate(runs.itertuples(index=False))
    }
    s = steps[steps["run_id"].isin(labels) & ~steps["warmup"].astype(bool)]
    return pd.DataFrame(
        {
            "label": s["run_id"].map(lambda r: labels[r][0]),
            "repeat": s["run_id"].map(lambda r: labels[r][1]),
            "step": s["step"],
            "phase": s["phase"],
            "duration_ns": s["duration_ns"],
        }
    )


def overhead_figure(table: pd.DataFrame):
    """Bars per phase (phase colours), one bar per label; the profiled ones hatched, overhead in hover."""
    import plotly.graph_objects as go

    labels = [c.removesuffix(" Avg (ns)") for c in table.columns if c.endswith(" Avg (ns)")]
    fig = go.Figure()
    colors = [phase_color(str(p).split()[0], i) for i, p in enumerate(table["Phase"])]
    for i, label in enumerate(labels):
        pct_col = f"{label} overhead (%)"
        pct = table[pct_col] if pct_col in table else pd.Series(0.0, index=table.index)
        fig.add_trace(
            go.Bar(
                name=label,
                x=table["Phase"],
                y=table[f"{label} Avg (ns)"] / MS,
                error_y={"type": "data", "array": (table[f"{label} StdDev (ns)"] / MS).tolist()},
                marker={"color": colors, "pattern": {"shape": PATTERNS[i % len(PATTERNS)]}},
                customdata=pd.DataFrame(
                    {"ns": table[f"{label} Avg (ns)"], "std": table[f"{label} StdDev (ns)"], "pct": pct}
                ).to_numpy(),
                hovertemplate=hover(
                    f"%{{x}} · {label}",
                    ns_ms("mean", "y", "customdata[0]"),
                    "std: %{customdata[1]:,.0f} ns",
                    "overhead: %{customdata[2]:+.2f} %",
                ),
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        barmode="group",
        height=420,
        yaxis_title="mean time per step (ms)",
        xaxis_title="phase",
        legend_title_text="profiler (hatched: with nsys)",
    )
    return fig


def overhead_panel(data: DashboardData) -> Panel:
    runs, source = overhead_runs(data.runs)
    if runs.empty:
        return Panel(
            missing="no runs both without and with nsys: run `harness overhead tiny --device cpu` "
            "(or `harness run tiny --nsys` beside a run without it)"
        )
    phases = ordered_phases(data.steps.loc[data.steps["run_id"].isin(runs["run_id"]), "phase"])
    table = overhead_table(overhead_steps(runs, data.steps), phases)
    first = runs.iloc[0]
    title = f"Profiler overhead: {first['model']} {first['precision']} on {first.get('device', '')}, {source}"
    return Panel(
        figure=overhead_figure(table), title=title, notes=[f"{len(runs)} runs, measured steps only."]
    )


def agreement_figure(table: pd.DataFrame):
    """(NVTX − timer) / timer in percent, per run (x) and phase (colour)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, phase in enumerate(ordered_phases(table["phase"])):
        p = table[table["phase"] == phase]
        fig.add_trace(
            go.Bar(
                name=phase,
                x=p["label"],
                y=p["rel_diff"] * 100,
                marker_color=phase_color(phase, i),
                customdata=pd.DataFrame(
                    {
                        "nvtx": p["nvtx_mean_ns"],
                        "nvtx_ms": p["nvtx_mean_ns"] / MS,
                        "timer": p["timer_mean_ns"],
                        "timer_ms": p["timer_mean_ns"] / MS,
                        "steps": p["steps"],
                    }
                ).to_numpy(),
                hovertemplate=hover(
                    f"%{{x}} · {phase}",
                    "NVTX − timer: %{y:+.3f} %",
                    ns_ms("NVTX mean", "customdata[1]", "customdata[0]"),
                    ns_ms("timer mean", "customdata[3]", "customdata[2]"),
                    "%{customdata[4]} measured steps",
                ),
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        barmode="group",
        height=400,
        yaxis_title="NVTX mean − timer mean (% of timer)",
        xaxis_title="profiled run",
        legend_title_text="phase",
    )
    return fig


def agreement_panel(data: DashboardData) -> Panel:
    if data.agreement.empty or data.runs.empty:
        return Panel(missing="no profiled runs: run `harness run tiny --device cpu --nsys`")
    labels = with_labels(data.runs)[["run_id", "label"]]
    table = data.agreement.merge(labels, on="run_id", how="inner")
    if table.empty:
        return Panel(
            missing="no agreement rows for the selected runs: run `harness run tiny --device cpu --nsys`"
        )
    return Panel(figure=agreement_figure(table))
