"""The per-block breakdown of a transformer step (--nvtx-detail): attention against MLP, and the parts inside.

Input is one row per (measured step, layer, block, phase) with the block's time in that step summed over its
calls, from any source (workloads.names: timers, torch-trace, nvtx, nvtx-gpu). `block_records` makes those
rows from a trace's ranges; harness.execution.block_timers makes them in the run's process.

Blocks nest: a layer holds two norms, attention and the MLP; attention holds qkv_proj, then qk_scores,
softmax and attn_v (attention="math") or one fused sdpa, then out_proj; the MLP holds mlp_up, mlp_act and
mlp_down. Outside the layers: embedding, the final norm and lm_head. The leaves (LEAVES) never overlap, so
their times plus "outside blocks" (the rest of each phase: residual adds, RoPE, reshapes, the loss, and
whole phases without blocks such as the optimizer) add up to the step.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import pandas as pd

from analysis.joins.nvtx_credits import attribute
from analysis.joins.nvtx_ranges import all_ranges, measured_steps
from analysis.trace.trace import Trace
from workloads.names import BLOCK_NVTX, BLOCK_NVTX_GPU, BLOCK_TORCH, LAYER, STEP

OUTSIDE = "outside blocks"
STEP_ROW = "step"
GROUPS = {"attention": LAYER, "mlp": LAYER}  # group -> its parent
PARENT = {
    "norm": LAYER,
    "qkv_proj": "attention",
    "qk_scores": "attention",
    "softmax": "attention",
    "attn_v": "attention",
    "sdpa": "attention",
    "out_proj": "attention",
    "mlp_up": "mlp",
    "mlp_act": "mlp",
    "mlp_down": "mlp",
}
LEAVES = ("embedding", "norm", "qkv_proj", "qk_scores", "softmax", "attn_v", "sdpa", "out_proj", "mlp_up",
          "mlp_act", "mlp_down", "lm_head")  # fmt: skip
ORDER = {name: i for i, name in enumerate((LAYER, "attention", "mlp", *LEAVES, OUTSIDE, STEP_ROW))}
RECORD_COLUMNS = ["step", "layer", "block", "phase", "duration_ns", "calls"]
TABLE_COLUMNS = ["phase", "block", "kind", "parent", "Mean (ns)", "Step (%)", "Count"]
_LAYER_RANGE = re.compile(r"^layer_(\d+)$")


def kind_of(block: str) -> str:
    """leaf (leaves add up), group (layer, attention, mlp: their parts and their own rest), outside, total."""
    if block == OUTSIDE:
        return "outside"
    if block == STEP_ROW:
        return "total"
    return "group" if block == LAYER or block in GROUPS else "leaf"


def block_records(
    trace: Trace,
    blocks: Collection[str],
    phases: Sequence[str],
    *,
    gpu: bool | None = None,
    step_offset: int = 0,
) -> tuple[pd.DataFrame, str]:
    """(RECORD_COLUMNS rows, source) from the ranges of a trace: each range named in `blocks` (and each
    layer_N range, as block "layer") inside a measured `step` range, with the step (its payload, else
    `step_offset` + its position), the layer around it and the phase (a name in `phases`) around it.

    Time is the range's own duration (CPU time; source "torch-trace" for a Kineto trace, "nvtx" for an nsys
    export), or with `gpu` (default: when the trace has kernels) the time of the kernels launched inside it
    on its thread (source "nvtx-gpu"). Block ranges are opened by forward hooks, so a train step's backward
    has none: its time stays with "outside blocks".
    """
    trace.require("nvtx", "NVTX or record_function ranges (run with --nvtx-detail)")
    gpu = trace.has("kernels") if gpu is None else gpu
    source = BLOCK_NVTX_GPU if gpu else BLOCK_NVTX if trace.format.startswith("nsys") else BLOCK_TORCH
    ranges = all_ranges(trace)
    ranges = ranges[ranges["style"] == "PushPop"].reset_index(drop=True)
    if ranges.empty:
        return pd.DataFrame(columns=RECORD_COLUMNS), source
    names = ranges["name"].astype(object).to_numpy()
    ids = ranges["range_id"].to_numpy()
    position = pd.Series(np.arange(len(ranges)), index=ids)
    parent_id = ranges["parent"].to_numpy(dtype=object)
    known = np.array([p is not pd.NA and p is not None for p in parent_id])
    parent = np.full(len(ranges), -1, dtype=np.int64)
    parent[known] = position.reindex(parent_id[known].astype(np.int64)).fillna(-1).to_numpy(dtype=np.int64)

    # the measured steps and their indices
    steps = measured_steps(ranges)
    payload = steps["payload"]
    order = np.arange(len(steps)) + step_offset
    index = np.where(payload.notna().to_numpy(), payload.fillna(-1).to_numpy(dtype=np.int64), order)
    step_of_range = dict(zip(steps.index.to_numpy(), index, strict=True))

    layer_no = np.array([int(m.group(1)) if (m := _LAYER_RANGE.match(str(n))) else -1 for n in names])
    is_block = np.isin(names, list(blocks)) | (layer_no >= 0)
    rows = np.flatnonzero(is_block)
    step = np.full(len(rows), -1, dtype=np.int64)
    layer = np.full(len(rows), -1, dtype=np.int64)
    phase = np.full(len(rows), None, dtype=object)
    own_layer = layer_no[rows]
    layer[own_layer >= 0] = own_layer[own_layer >= 0]
    cur = parent[rows]
    phase_names = set(phases)
    while (cur >= 0).any():
        live = cur >= 0
        at = cur[live]
        ln = layer_no[at]
        sub = layer[live]
        sub[(sub < 0) & (ln >= 0)] = ln[(sub < 0) & (ln >= 0)]
        layer[live] = sub
        nm = names[at]
        ph = phase[live]
        take = np.array([p is None and n in phase_names for p, n in zip(ph, nm, strict=True)], dtype=bool)
        ph[take] = nm[take]
        phase[live] = ph
        st = step[live]
        hit = np.array(
            [n == STEP and int(a) in step_of_range for n, a in zip(nm, at, strict=True)], dtype=bool
        )
        st[hit] = [step_of_range[int(a)] for a in at[hit]]
        step[live] = st
        cur[live] = parent[at]
    keep = (step >= 0) & np.array([p is not None for p in phase], dtype=bool)
    rows, step, layer, phase = rows[keep], step[keep], layer[keep], phase[keep]
    if gpu:
        launches, granges, pairs = attribute(
            trace, mode="thread", exclusive=False, range_columns=("range_id",)
        )
        hit = pairs["range"].to_numpy()
        credit = pd.DataFrame(
            {
                "range_id": granges["range_id"].to_numpy()[np.maximum(hit, 0)][hit >= 0],
                "ns": launches["duration"].to_numpy()[pairs["launch"].to_numpy()[hit >= 0]],
            }
        )
        per_range = credit.groupby("range_id")["ns"].sum()
        duration = per_range.reindex(ids[rows]).fillna(0).to_numpy(dtype=np.int64)
    else:
        duration = ranges["duration_ns"].to_numpy()[rows]
    block = np.where(layer_no[rows] >= 0, LAYER, names[rows])
    frame = pd.DataFrame(
        {
            "step": step,
            "layer": pd.array(np.where(layer >= 0, layer, 0), dtype="Int64"),
            "block": block,
            "phase": phase,
            "duration_ns": duration,
        }
    )
    frame.loc[layer < 0, "layer"] = pd.NA
    out = (
        frame.groupby(["step", "layer", "block", "phase"], dropna=False, sort=False)
        .agg(duration_ns=("duration_ns", "sum"), calls=("duration_ns", "size"))
        .reset_index()
    )
    return out[RECORD_COLUMNS], source


def block_table(
    records: pd.DataFrame,
    phase_ns: Mapping[str, float],
    *,
    steps: int,
    by_layer: bool = False,
) -> pd.DataFrame:
    """Per phase and block (and layer, `by_layer`): the mean time per step (ns), its share of the step and
    how many times it ran (Count), then per phase `outside blocks` (the phase's mean minus its leaves) and
    the `step` (the sum of the phases' means: 100%). TABLE_COLUMNS, with `layer` after `block` by layer.

    `records`: RECORD_COLUMNS of the measured steps; `phase_ns`: each phase's mean over the measured steps
    (in the run's phase order); `steps`: how many measured steps the records cover.
    """
    if steps <= 0:
        raise ValueError("no measured steps")
    step_ns = float(sum(phase_ns.values()))
    # a block both inside layers and outside them (the norms, and the final norm) is two rows without
    # --by-layer too: the final norm is in no layer
    records = records.assign(outer=records["layer"].isna())
    keys = ["phase", "block", "layer"] if by_layer else ["phase", "block", "outer"]
    grouped = records.groupby(keys, dropna=False, sort=False).agg(
        total=("duration_ns", "sum"), Count=("calls", "sum")
    )
    table = grouped.reset_index()
    table["Mean (ns)"] = table.pop("total") / steps
    rank = {p: i for i, p in enumerate(phase_ns)}
    table["kind"] = table["block"].map(kind_of)
    table["parent"] = table["block"].map(lambda b: PARENT.get(b) or GROUPS.get(b))
    # a norm's parent is a layer only inside one
    outer = table["layer"].isna() if by_layer else table.pop("outer").astype(bool)
    table.loc[outer & (table["parent"] == LAYER), "parent"] = None
    inner = ~outer.to_numpy()
    outside = []
    for p, ns in phase_ns.items():
        leaves = table[(table["phase"] == p) & (table["kind"] == "leaf")]["Mean (ns)"].sum()
        outside.append({"phase": p, "block": OUTSIDE, "kind": "outside", "Mean (ns)": float(ns) - leaves,
                        "Count": steps})  # fmt: skip
    total = {"phase": "all", "block": STEP_ROW, "kind": "total", "Mean (ns)": step_ns, "Count": steps}
    after = np.r_[~inner, np.ones(len(outside) + 1, dtype=bool)]  # a block's row in no layer after its others
    table = pd.concat([table, pd.DataFrame(outside), pd.DataFrame([total])], ignore_index=True)
    table["Step (%)"] = table["Mean (ns)"] / step_ns * 100 if step_ns else np.nan
    table["Count"] = table["Count"].astype("int64")
    sort = pd.DataFrame(
        {
            "p": table["phase"].map(lambda x: rank.get(x, len(rank))),
            "b": table["block"].map(lambda x: ORDER.get(x, len(ORDER))),
            "l": table["layer"].fillna(-1).astype("int64") if by_layer else after.astype("int64"),
        }
    )
    table = table.loc[sort.sort_values(["p", "l", "b"] if by_layer else ["p", "b", "l"], kind="stable").index]
    columns = TABLE_COLUMNS[:2] + (["layer"] if by_layer else []) + TABLE_COLUMNS[2:]
    if by_layer:
        table["layer"] = table["layer"].astype("Int64")
    return table[columns].reset_index(drop=True)


def leaf_sum_check(table: pd.DataFrame) -> float:
    """(leaves + outside blocks) / step, from an aggregated block_table: 1.0 when they add up."""
    parts = table[table["kind"].isin(["leaf", "outside"])]["Mean (ns)"].sum()
    step = table[table["kind"] == "total"]["Mean (ns)"].sum()
    return float(parts / step) if step else float("nan")


def share_by_block(records: pd.DataFrame, phase_ns: Mapping[str, float], steps: int) -> pd.DataFrame:
    """Leaves and `outside blocks`, each with its share of the step (%), summed over phases and layers: one
    run's bar in the dashboard's stacked bars."""
    table = block_table(records, phase_ns, steps=steps)
    parts = table[table["kind"].isin(["leaf", "outside"])]
    out = parts.groupby("block", sort=False)[["Mean (ns)", "Step (%)"]].sum().reset_index()
    return out.sort_values("block", key=lambda s: s.map(lambda b: ORDER.get(b, len(ORDER)))).reset_index(
        drop=True
    )


def subblock_times(records: pd.DataFrame, steps: int) -> pd.DataFrame:
    """One step's time per leaf block and phase, all layers together (sub-block, pass, time_ns): the times
    analysis.runs.roofline.roofline_table places against the roofs (leaf names are its sub-block names)."""
    leaves = records[records["block"].isin(list(LEAVES))]
    out = leaves.groupby(["block", "phase"], sort=False)["duration_ns"].sum().div(steps).reset_index()
    return out.rename(columns={"block": "sub-block", "phase": "pass", "duration_ns": "time_ns"})
