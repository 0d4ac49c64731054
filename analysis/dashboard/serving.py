"""Generate's serving figures across runs: time to first token (p50, p99) and per output token (p50, p90,
p99), output tokens/s, the KV cache allocated against its analytic size and, where a capture of the GPU gave
it, decode's GPU-busy share; one group of bars per run (the decode path in its label: eager, CUDA graphs,
torch.compile)."""

from __future__ import annotations

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.runs import model_order, profiler_label, with_labels
from analysis.dashboard.style import MS, PALETTE, TEMPLATE, hover
from workloads.names import MEASURED_STATUSES, NO_DECODE, PERCENTILE_SAMPLES

MAX_RUNS = 12
NO_SERVING = (
    "no generate runs with serving figures: run `harness run tiny --mode generate --device cpu` (on a GPU, "
    "also with --cuda-graphs)"
)
# (subplot title, its unit's scale from the stored value, the runs' columns drawn in it and their names)
SUBPLOTS = (
    ("time to first token (ms)", 1 / MS, (("ttft_p50_ns", "p50"), ("ttft_p99_ns", "p99"))),
    (
        "time per output token (ms)",
        1 / MS,
        (("tpot_p50_ns", "p50"), ("tpot_p90_ns", "p90"), ("tpot_p99_ns", "p99")),
    ),
    ("output tokens/s", 1.0, (("tokens_per_s", "tokens/s"),)),
    ("KV cache (MiB)", 1 / 2**20, (("kv_cache_bytes", "allocated"), ("kv_cache_analytic_bytes", "analytic"))),
    ("decode GPU busy (%)", 100.0, (("decode_gpu_busy", "busy"),)),
)
BUSY = SUBPLOTS[-1][0]  # drawn where a run has it: a capture of the GPU (nsys or torch.profiler) measures it
COLUMNS = ["run_id", "label", "model", "decode_path", *(c for _, _, cols in SUBPLOTS for c, _ in cols)]


def drawable(runs: pd.DataFrame) -> pd.DataFrame:
    """The generate runs that measured their steps and have a time to first token: one of --new-tokens 1 (a
    TTFT benchmark) decodes no token after it, so has no TPOT, and is drawn with its TTFT, tokens/s and KV
    cache."""
    if runs.empty or "ttft_p50_ns" not in runs or "mode" not in runs:
        return runs.iloc[0:0]
    return runs[
        (runs["mode"] == "generate") & runs["status"].isin(MEASURED_STATUSES) & runs["ttft_p50_ns"].notna()
    ]


def serving_table(runs: pd.DataFrame, limit: int = MAX_RUNS) -> pd.DataFrame:
    """The newest `limit` generate runs that measured their steps and have serving figures (a time to first
    token; TPOT empty where a run decoded no token after it): COLUMNS, the times in ns, each label the run's
    (model · setting · id), its decode path and its profiler if any."""
    picked = drawable(runs).tail(limit)
    if picked.empty:
        return pd.DataFrame(columns=COLUMNS)
    out = with_labels(picked)
    under = [profiler_label(r) for r in out.to_dict("records")]  # its times include the profiler's
    # a run of --new-tokens 1 decoded nothing, whatever path it was stored with
    new_tokens = out["new_tokens"] if "new_tokens" in out else [None] * len(out)
    paths = zip(new_tokens, out["decode_path"], strict=True)
    out["decode_path"] = [NO_DECODE if n == 1 else p for n, p in paths]
    out["label"] = [
        " · ".join(filter(None, (label, path, p)))
        for label, path, p in zip(out["label"], out["decode_path"], under, strict=True)
    ]
    order = {m: i for i, m in enumerate(model_order(runs))}
    out = out.assign(_m=out["model"].map(order)).sort_values("_m", kind="stable").drop(columns="_m")
    return out.reindex(columns=COLUMNS).reset_index(drop=True)


def serving_figure(table: pd.DataFrame):
    """One subplot per figure, a bar per run (p50, p90 and p99 side by side), the exact stored value (ns,
    bytes, a share) in each hover; decode's GPU-busy share only where a run has one."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    shown = [s for s in SUBPLOTS if s[0] != BUSY or table["decode_gpu_busy"].notna().any()]
    fig = make_subplots(rows=1, cols=len(shown), subplot_titles=[t for t, _, _ in shown])
    for col, (title, scale, columns) in enumerate(shown, start=1):
        for i, (column, name) in enumerate(columns):
            values = table[column].astype(float)
            raw = {1 / MS: "%{customdata[1]:,.0f} ns", 1 / 2**20: "%{customdata[1]:,.0f} bytes"}.get(
                scale, "%{customdata[1]:,.3f}"
            )
            fig.add_trace(
                go.Bar(
                    name=f"{title.split(' (')[0]} {name}" if len(columns) > 1 else title,
                    x=table["label"],
                    y=values * scale,
                    marker_color=PALETTE[(2 * col + i) % len(PALETTE)],
                    customdata=table[["run_id", column]].to_numpy(),
                    hovertemplate=hover(
                        f"%{{x}} · {name}", f"{title}: %{{y:,.3f}}", raw, "run %{customdata[0]}"
                    ),
                ),
                row=1,
                col=col,
            )
        fig.update_yaxes(title_text=title, row=1, col=col)
        fig.update_xaxes(tickangle=-30, automargin=True, row=1, col=col)
    fig.update_layout(template=TEMPLATE, barmode="group", height=480, legend_title_text="figure")
    return fig


def serving_panel(data: DashboardData) -> Panel:
    table = serving_table(data.runs)
    if table.empty:
        return Panel(missing=NO_SERVING)
    needed = ", ".join(f"p{q} needs {n}" for q, n in PERCENTILE_SAMPLES.items() if n > 1)
    notes = [
        "TTFT is each measured step's prefill (it ends with the first token chosen); TPOT is each decoded "
        "token's own time, p50, p90 and p99 over every token of the measured steps; output tokens/s is the "
        "batch's tokens over the measured steps' time. The KV cache is the bytes the run allocated for it "
        "beside the analytic size of its keys and values; decode's GPU-busy share (a run under nsys or "
        "torch.profiler on a GPU) is the part of decode's time the GPU was running its work. A percentile "
        f"of too few samples is not drawn ({needed}; TTFT's samples are the measured steps, TPOT's the "
        "decoded tokens).",
    ]
    if len(drawable(data.runs)) > MAX_RUNS:  # a failed run, or one with no serving figures, is not drawn
        notes.append(f"The newest {MAX_RUNS} generate runs; pick others with --runs or --last.")
    return Panel(figure=serving_figure(table), notes=notes)
