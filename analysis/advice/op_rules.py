"""Rules that read the framework's operators where a trace holds no GPU work (a CPU run under
torch.profiler): a Python loop over the parameters in the model's step (what launch-bound is on a host that
dispatches every operator), and attention computed as separate operators. On a trace with kernels the GPU's
rules judge the same causes (analysis.advice.gpu_rules)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analysis.advice.base import FIX_ATTENTION, Finding, Seen
from analysis.advice.where import inside, ms
from workloads.names import BACKWARD, FORWARD

PARAMETER_GRAD = "torch::autograd::AccumulateGrad"  # once per parameter tensor in each backward
# operators that move no data of their own (views, allocation, bookkeeping): never a loop's cost
BOOKKEEPING = re.compile(
    r"aten::(view|_unsafe_view|reshape|t|transpose|permute|expand|select|slice|as_strided|alias|detach|"
    r"unsqueeze|squeeze|empty|empty_strided|empty_like|resolve_conj|resolve_neg)|detach|.*AccumulateGrad.*"
)
BACKWARD_NODE = re.compile(r"autograd::engine::evaluate_function: (\w+)")
FUSED_ATTENTION_OPS = re.compile(r".*(scaled_dot_product|flash_attention|efficient_attention).*")
SOFTMAX_OPS = ("aten::_softmax",)
MATH_ATTENTION_OPS = ("aten::_softmax", "aten::_softmax_backward_data", "aten::bmm", "aten::masked_fill")


def _top_level(ops: pd.DataFrame) -> pd.DataFrame:
    """Operators not inside another operator of their thread."""
    ops = ops.sort_values(["global_tid", "start", "end"], ascending=[True, True, False])
    keep = np.zeros(len(ops), dtype=bool)
    reach: dict[int, int] = {}
    for i, (tid, start, end) in enumerate(zip(ops["global_tid"], ops["start"], ops["end"], strict=True)):
        keep[i] = start >= reach.get(tid, -(2**62))
        if keep[i]:
            reach[tid] = end
    return ops[keep]


def _in(seen: Seen, ops: pd.DataFrame, phase: str) -> pd.DataFrame:
    rs = seen.phase_ranges(phase)
    return ops[inside(rs, ops["start"].to_numpy(), ops["pid"].to_numpy())] if len(rs) else ops.iloc[:0]


def parameter_loop(seen: Seen) -> list[Finding]:
    """Launch-bound on a host: operators run once per parameter in forward (a Python loop over the
    parameters: a penalty, a norm, an update written per tensor), each dispatched on its own (on a GPU, each
    its own kernel launch). The parameters are counted by autograd: one AccumulateGrad per parameter
    tensor a backward."""
    if seen.has_gpu or seen.ops.empty or seen.steps.empty:
        return []
    steps = len(seen.steps)
    ops = seen.ops[seen.in_steps(seen.ops["start"].to_numpy(), seen.ops["pid"].to_numpy())]
    params = int((ops["name"] == PARAMETER_GRAD).sum()) // steps
    forward = _top_level(_in(seen, ops, FORWARD))
    if params < 2 or forward.empty:
        return []
    counts = forward["name"].value_counts()
    looped = [str(n) for n, c in counts.items() if c >= params * steps and not BOOKKEEPING.fullmatch(str(n))]
    if not looped:
        return []
    mine = forward[forward["name"].isin(looped)]
    nodes = _in(seen, ops, BACKWARD)
    node = nodes["name"].astype(str).str.extract(BACKWARD_NODE, expand=False)
    node_counts = node.value_counts()
    back = nodes[
        node.isin([n for n, c in node_counts.items() if c >= params * steps and "AccumulateGrad" not in n])
    ]
    stake = int((mine["end"] - mine["start"]).sum() + (back["end"] - back["start"]).sum())
    per_step = [int(counts[n]) // steps for n in looped]
    per_op = [{"name": n, "per step": c} for n, c in zip(looped, per_step, strict=True)]
    evidence = (
        f"forward runs {', '.join(f'{n} ×{c}' for n, c in zip(looped, per_step, strict=True))} a step: "
        "once per parameter "
        f"({params} parameter tensors get gradients), a loop over the parameters, {len(forward) // steps:,} "
        f"operators a forward; with their {len(back) // steps:,} backward nodes a step they take {ms(stake)}"
    )
    fix = (
        "do the per-parameter work as one operation over all of them (torch._foreach_*, a flattened "
        "buffer) or under torch.compile; a larger batch gives each operator more work"
    )
    data = {
        "parameters": params,
        "steps": steps,
        "looped operators": per_op,
        "operators a forward": len(forward) // steps,
        "backward nodes a step": len(back) // steps,
        "time (ns)": stake,
    }
    where = seen.place(
        mine["start"].to_numpy(), (mine["end"] - mine["start"]).to_numpy(), mine["pid"].to_numpy()
    )
    return [Finding("launch-bound", stake, where, evidence, fix, data=data)]


def math_attention_ops(seen: Seen) -> list[Finding]:
    """Attention as separate operators: softmax over materialised scores between batched matmuls, and no
    fused scaled_dot_product_attention in the steps."""
    if seen.trace.has("kernels") or seen.ops.empty or seen.steps.empty:
        return []
    ops = seen.ops[seen.in_steps(seen.ops["start"].to_numpy(), seen.ops["pid"].to_numpy())]
    soft = ops[ops["name"].isin(SOFTMAX_OPS)]
    fused = ops[ops["name"].astype(str).str.fullmatch(FUSED_ATTENTION_OPS)]
    bmm = ops[ops["name"] == "aten::bmm"]
    if len(soft) < len(seen.steps) or len(fused) or len(bmm) < 2 * len(soft):
        return []
    math = ops[ops["name"].isin(MATH_ATTENTION_OPS)]
    stake = int((math["end"] - math["start"]).sum())
    counts = math["name"].value_counts()
    evidence = (
        f"{len(soft):,} softmax operators in {len(seen.steps)} steps between {len(bmm):,} batched matmuls, "
        f"no scaled_dot_product_attention: the scores are materialised; "
        + ", ".join(f"{n} ×{c:,}" for n, c in counts.items())
        + f" take {ms(stake)}"
    )
    fix = FIX_ATTENTION
    data = {
        "operators": {str(n): int(c) for n, c in counts.items()},
        "time (ns)": stake,
        "steps": len(seen.steps),
        "fused attention operators": 0,
    }
    where = seen.place(
        math["start"].to_numpy(), (math["end"] - math["start"]).to_numpy(), math["pid"].to_numpy()
    )
    return [Finding("math-attention", stake, where, evidence, fix, data=data)]
