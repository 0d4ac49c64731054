"""Per-block breakdown panel (seed 004's block plots): each block's share of the step, per model size.

Shares, not times, so that model sizes compare on one axis. Left: attention against MLP (and the norms,
embedding, LM head and what is outside every block); right: the parts inside attention and the MLP.
One bar per configuration (analysis.dashboard.runs.block_runs: the newest run with block times, one without a
profiler preferred), smallest model first.
"""

from __future__ import annotations

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.runs import block_runs, model_order, with_labels
from analysis.dashboard.style import PALETTE, TEMPLATE, hover
from analysis.views.blocks import GROUPS, LEAVES, OUTSIDE, PARENT, share_by_block
from workloads.names import PHASES_BY_MODE

NO_BLOCKS = "no runs with per-block times: run `harness run tiny --device cpu --nvtx-detail --steps 3`"
COLUMNS = ["label", "model", "run_id", "source", "view", "block", "Mean (ns)", "Step (%)"]
# left subplot: what a step is made of at the top level (adds up to 100%); right: inside attention and MLP
TOP = ("attention", "mlp", "norm", "embedding", "lm_head", OUTSIDE)
INNER = tuple(b for b in LEAVES if PARENT.get(b) in GROUPS)
BLOCK_COLORS = {
    "attention": "#4C78A8",
    "mlp": "#F58518",
    "norm": "#54A24B",
    "embedding": "#B279A2",
    "lm_head": "#E45756",
    OUTSIDE: "#BAB0AC",
    "qkv_proj": "#1F4E79",
    "qk_scores": "#2E75B6",
    "softmax": "#5B9BD5",
    "attn_v": "#9DC3E6",
    "sdpa": "#4C78A8",
    "out_proj": "#BDD7EE",
    "mlp_up": "#C55A11",
    "mlp_act": "#F4B183",
    "mlp_down": "#843C0C",
}


def block_shares(data: DashboardData) -> pd.DataFrame:
    """COLUMNS: per configuration (newest run with block times), each block's share of the step. view "top":
    attention, mlp (wholes), norm, embedding, lm_head and the rest of the step (they add up to 100%); view
    "inner": the leaves inside attention and the MLP."""
    blocks = data.blocks
    if blocks.empty or data.runs.empty:
        return pd.DataFrame(columns=COLUMNS)
    runs = block_runs(data.runs, blocks)
    if runs.empty:
        return pd.DataFrame(columns=COLUMNS)
    latest = with_labels(runs)
    multi = latest["setting"].nunique() > 1
    order = {m: i for i, m in enumerate(model_order(latest))}
    latest = latest.assign(_o=latest["model"].map(order)).sort_values("_o", kind="stable")
    rows = []
    for r in latest.to_dict("records"):
        mine = blocks[blocks["run_id"] == r["run_id"]]
        steps = data.steps[(data.steps["run_id"] == r["run_id"]) & ~data.steps["warmup"].astype(bool)]
        steps = steps[steps["step"].isin(set(mine["step"]))]
        n = steps["step"].nunique()
        if not n:
            continue
        phase_ns = (steps.groupby("phase", sort=False)["duration_ns"].sum() / n).to_dict()
        shares = share_by_block(mine, _in_mode_order(phase_ns, r.get("mode")), n)
        inner = shares[shares["block"].isin(INNER)]
        top = pd.concat([_group_shares(mine, phase_ns, n), shares[shares["block"].isin(TOP)]])
        top = top[top["block"] != OUTSIDE]
        rest = 100.0 - float(top["Step (%)"].sum())
        step_ns = sum(phase_ns.values())
        rest_row = {"block": OUTSIDE, "Mean (ns)": rest / 100 * step_ns, "Step (%)": rest}
        top = pd.concat([top, pd.DataFrame([rest_row])], ignore_index=True)
        label = f"{r['model']} · {r['setting']}" if multi else str(r["model"])
        for view, part in (("top", top), ("inner", inner)):
            for b in part.to_dict("records"):
                rows.append({"label": label, "model": r["model"], "run_id": r["run_id"],
                             "source": str(mine["source"].iloc[0]), "view": view, **b})  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def _in_mode_order(phase_ns: dict, mode: object) -> dict:
    """`phase_ns` in the mode's phase order (forward, backward, optimizer; prefill, decode)."""
    order = PHASES_BY_MODE.get(str(mode), ())
    return {p: phase_ns[p] for p in [*order, *phase_ns] if p in phase_ns}


def _group_shares(records: pd.DataFrame, phase_ns: dict, steps: int) -> pd.DataFrame:
    """attention and mlp as wholes (their own time, rest included), summed over phases and layers."""
    step_ns = sum(phase_ns.values())
    part = records[records["block"].isin(list(GROUPS))]
    out = part.groupby("block", sort=False)["duration_ns"].sum().div(steps).rename("Mean (ns)").reset_index()
    out["Step (%)"] = out["Mean (ns)"] / step_ns * 100 if step_ns else float("nan")
    return out


def blocks_figure(shares: pd.DataFrame):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("attention vs MLP (share of the step)", "inside attention and the MLP"),
        horizontal_spacing=0.08,
    )
    for col, view, names in ((1, "top", TOP), (2, "inner", INNER)):
        for i, block in enumerate(names):
            part = shares[(shares["view"] == view) & (shares["block"] == block)]
            if part.empty:
                continue
            fig.add_trace(
                go.Bar(
                    name=block,
                    legendgroup=block,
                    x=part["label"],
                    y=part["Step (%)"],
                    marker_color=BLOCK_COLORS.get(block, PALETTE[i % len(PALETTE)]),
                    customdata=part[["Mean (ns)", "run_id", "source"]].to_numpy(),
                    hovertemplate=hover(
                        f"%{{x}} · {block}",
                        "%{y:.1f}% of the step",
                        "%{customdata[0]:,.0f} ns per step",
                        "run %{customdata[1]} · source %{customdata[2]}",
                    ),
                ),
                row=1,
                col=col,
            )
    fig.update_layout(barmode="stack", template=TEMPLATE, height=460, legend_title_text="block")
    fig.update_yaxes(title_text="share of the step (%)", row=1, col=1)
    return fig


def blocks_panel(data: DashboardData) -> Panel:
    shares = block_shares(data)
    if shares.empty:
        return Panel(missing=NO_BLOCKS)
    sources = sorted(set(shares["source"]))
    notes = [
        f"source: {', '.join(sources)}; `outside blocks` is the rest of the step: residual adds, the loss, "
        "the optimizer, the backward where the source has forward ranges only (RoPE and reshapes are inside "
        "attention on the left, outside on the right)"
    ]
    return Panel(figure=blocks_figure(shares), notes=notes)
