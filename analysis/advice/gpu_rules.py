"""Rules that read the GPU's work: the GPU waiting for the host, launch-bound phases, the optimizer's small
kernels (or its memory roof, from the run's roofline), exposed communication, fp32 GEMMs and math attention
by the kernels' names. The GPU idle the harness's own synchronisations leave (analysis.advice.instruments)
counts as the harness's, never as the user's idle time."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from analysis.advice.base import FIX_ATTENTION, Finding, Seen
from analysis.advice.labels import label_test
from analysis.advice.where import ms, phase_table
from analysis.hta.breakdown import LAUNCH_CALLS, idle_intervals, idle_time_table
from analysis.hta.gpu_events import COMPUTATION, gpu_events, merge, sweep, types_of
from analysis.intervals import clipped_sums
from analysis.readers.global_ids import PROCESS_MASK, pid_of

# cuBLAS / CUTLASS GEMMs that compute in fp32 on the CUDA cores: SIMT sgemm, xmma's f32 inputs with FFMA,
# cuBLASLt's nvjet single-precision kernels; none of them TF32, bf16 or fp16 (those name their type)
GEMM = re.compile(r"gemm|xmma|nvjet|cublas", re.IGNORECASE)
FP32_GEMM = re.compile(r"sgemm|gemm_f32f32_f32f32|_ffma_|nvjet_sss", re.IGNORECASE)
LOW_PRECISION = re.compile(
    r"tf32|bf16|bfloat16|f16|half|hmma|s1688|s16816|h1688|h16816|fp8|e4m3|e5m2|i8i8", re.IGNORECASE
)
FUSED_ATTENTION = re.compile(r"fmha|flash|attention|attn|sdpa|mem_eff", re.IGNORECASE)
SOFTMAX = re.compile(r"softmax", re.IGNORECASE)
NOT_ATTENTION_SOFTMAX = re.compile(r"log_?softmax|cross_?entropy|nll_loss", re.IGNORECASE)


def host_wait(seen: Seen) -> list[Finding]:
    """The GPU waits for the host: HTA's host-wait idle time on the busiest stream (analysis.hta.breakdown's
    idle time table, equal to HTA's on its fixtures), less what the harness's synchronisations cause
    and its time between steps. In a harness run, only its measured steps count (its `measured` range:
    loading the model and the warm-up steps are not the step a user tunes), against their time."""
    trace = seen.trace
    if seen.gpu_work is None:
        return []
    ev = seen.gpu_work
    measured = bool(len(seen.measured) and len(seen.steps))
    busy = _busy(ev, seen.steps if measured else None)
    pid, device, stream = (int(v) for v in busy.idxmax())  # a stream of one device of one process
    span = int(ev["end"].max() - ev["start"].min())
    said: list[str] = []
    gaps = idle_intervals(trace, said, events=ev)  # once: the idle time table is their sums
    idle = idle_time_table([trace], [gaps], said)
    lane = (gaps["global_pid"] == pid) & (gaps["device"] == device) & (gaps["Stream"] == stream)
    gaps = gaps[lane]
    mine = gaps.groupby("category")["gap"].sum().astype(np.int64)  # the idle time table's rows of it
    gaps = gaps[gaps["gap"].notna()]
    shared = len(busy.xs(stream, level="stream")) > 1  # the id names streams of other devices or processes
    named = f"stream {stream}" + (f" of process {int(pid_of(pid))} (device {device})" if shared else "")
    within = "in a"
    after = " span"
    if measured:
        gaps = gaps[seen.in_steps((gaps["start"] - gaps["gap"]).to_numpy(dtype=np.int64))]
        mine = gaps.groupby("category")["gap"].sum().astype(np.int64)
        span, within, after = seen.step_time, f"in its {len(seen.steps)} measured steps,", ""
    gaps = gaps[gaps["category"] == "host_wait"]
    prev_end = (gaps["start"] - gaps["gap"]).to_numpy(dtype=np.int64)
    after_syncs, between = seen.instruments.overlap_parts(prev_end, gaps["start"].to_numpy(dtype=np.int64))
    harness = after_syncs + between
    user = gaps["gap"].to_numpy(dtype=np.int64) - harness
    waited = int(mine.get("host_wait", 0)) - int(harness.sum())
    if not span or waited <= 0 or waited < seen.th.host_wait_share * span:  # no wait: nothing to say
        return []
    split = ", ".join(f"{c.replace('_', '-')} {ms(v)}" for c, v in mine.items())
    evidence = (
        f"{named} (the busiest: {ms(busy.max())} of GPU work {within} {ms(span)}{after}) "
        f"idles {split}; "
        f"{len(gaps):,} gaps wait for the host to launch (HTA's idle categories)"
    )
    if harness.sum():
        parts = [
            f"{ms(part.sum())} {what}"
            for part, what in ((after_syncs, "after its synchronisations"), (between, "between its steps"))
            if part.sum()
        ]
        evidence += f"; {ms(harness.sum())} of them are the harness's ({', '.join(parts)}): left out"
    fix = (
        "the host launches too late: find the CPU work before the gaps (Python, synchronisations, I/O), "
        "overlap it with the GPU, batch more per launch or fuse operators"
    )
    data = {
        "stream": stream,
        **({"process": int(pid_of(pid)), "device": device} if shared else {}),
        "GPU work (ns)": int(busy.max()),
        "span (ns)": span,
        "idle (ns)": {str(c): int(v) for c, v in mine.items()},
        "host-wait gaps": len(gaps),
        "harness's part (ns)": int(harness.sum()),
        "after its synchronisations (ns)": int(after_syncs.sum()),
        "between its steps (ns)": int(between.sum()),
    }
    where = seen.place(prev_end, np.maximum(user, 0))
    return [Finding("gpu-host-wait", waited, where, evidence, fix, idle, data)]


def _busy(ev: pd.DataFrame, steps: pd.DataFrame | None) -> pd.Series:
    """Each stream's GPU work (ns), by (global_pid, device, stream): two processes' or devices' streams may
    share an id. All of it, or its part inside the steps (their union) where a harness run's measured steps
    are what the rule reads: the warm-up's and the model's loading are not in them."""
    lanes = ["global_pid", "device", "stream"]
    if steps is None:
        return (ev["end"] - ev["start"]).groupby([ev[c] for c in lanes]).sum()
    lo, hi = merge(steps["start"].to_numpy(dtype=np.int64), steps["end"].to_numpy(dtype=np.int64))
    return pd.Series(
        {
            key: int(clipped_sums(g["start"].to_numpy(), g["end"].to_numpy(), lo, hi).sum())
            for key, g in ev.groupby(lanes, observed=True)
        }
    ).rename_axis(lanes)


def _exposed(
    ev: pd.DataFrame, kind: np.ndarray, rows: np.ndarray
) -> tuple[int, int, int, np.ndarray, np.ndarray]:
    """Of the GPU events `rows` (one GPU of one process): the communication kernels' time, the part of it
    with no compute kernel beside it, their span, and the stretches of that part (from, to)."""
    start, end, k = ev["start"].to_numpy()[rows], ev["end"].to_numpy()[rows], kind[rows]
    comm = merge(start[k == "COMMUNICATION"], end[k == "COMMUNICATION"])
    comp = merge(start[k == COMPUTATION], end[k == COMPUTATION])
    state, lo, hi = sweep([comm, comp])
    alone = state == 1  # communication only
    span = int(end.max() - start.min()) if len(start) else 0
    return int((comm[1] - comm[0]).sum()), int((hi - lo)[alone].sum()), span, lo[alone], hi[alone]


def _phases(seen: Seen) -> pd.DataFrame:
    """The phase table (analysis.advice.where.phase_table) of the measured phases, with the harness's part
    of each range (the GPU idle after its synchronisations)."""
    table = phase_table(seen.trace, LAUNCH_CALLS)
    if table.empty:
        return table
    keep = pd.MultiIndex.from_frame(seen.ranges[["start", "pid"]])
    table = table[pd.MultiIndex.from_frame(table[["start", "pid"]]).isin(keep)]
    harness = seen.instruments.overlap(table["start"].to_numpy(), table["end"].to_numpy())
    return table.assign(harness=harness)


def launch_bound(seen: Seen) -> list[Finding]:
    """Phases where the GPU is mostly idle while the host spends its time launching."""
    table = _phases(seen)
    if table.empty:
        return []
    th, out = seen.th, []
    for phase, t in table.groupby("phase", sort=False):
        wall, busy, launch = (
            int((t["end"] - t["start"]).sum()),
            int(t["busy"].sum()),
            int(t["launch_time"].sum()),
        )
        harness = int(t["harness"].sum())
        if not wall or busy + harness >= th.launch_busy_below * wall or launch < th.launch_share_above * wall:
            continue
        evidence = (
            f"{len(t)} {phase} ranges, {ms(wall)}: GPU busy {ms(busy)} ({100 * busy / wall:.0f}%), "
            f"{int(t['launches'].sum()):,} launch calls take {ms(launch)} ({100 * launch / wall:.0f}%) of it"
        )
        if harness:
            evidence += f"; {ms(harness)} of GPU idle after the harness's synchronisations left out"
        fix = (
            "the host cannot launch fast enough: capture the phase in a CUDA graph, or "
            'torch.compile(mode="reduce-overhead"); larger batches give each launch more work'
        )
        data = {
            "phase": phase,
            "ranges": len(t),
            "wall (ns)": wall,
            "GPU busy (ns)": busy,
            "launch calls": int(t["launches"].sum()),
            "launch time (ns)": launch,
            "harness's part (ns)": harness,
        }
        where = seen.place(t["start"].to_numpy(), (t["end"] - t["start"]).to_numpy(), t["pid"].to_numpy())
        out.append(Finding("launch-bound", wall - busy - harness, where, evidence, fix, data=data))
    return out


def optimizer_loop(seen: Seen) -> list[Finding]:
    """An optimizer step far below what it could be: on a stored run with its roofline, below
    `optimizer_roof_below` of its memory roof; on an export, many small kernels a step (a loop over the
    parameters, not foreach or fused)."""
    fix = (
        "use the fused or multi-tensor optimizer: torch.optim.AdamW(..., fused=True) on CUDA, or "
        "foreach=True, so each step is a few large kernels instead of several per parameter"
    )
    roof = seen.run.optimizer_roof if seen.run else None
    opt = _phases(seen)
    opt = opt[opt["phase"] == "optimizer"] if len(opt) else opt
    kernels = {}
    if len(opt):
        kernels = {
            "kernels per step": float(opt["kernels"].mean()),
            "median kernel (ns)": float(np.median(opt["kernel_median"])),
        }
    if roof is not None:
        if roof.of_roof_pct >= 100 * seen.th.optimizer_roof_below:
            return []
        steps = max(seen.run.measured_steps if seen.run else 1, 1)
        stake = max(round((roof.time_ns - roof.roofline_ns) * steps), 0)
        evidence = (
            f"the optimizer step moves {roof.bytes / 1e9:,.2f} GB in {ms(roof.time_ns)} "
            f"({roof.achieved_gbs:,.1f} GB/s): {roof.of_roof_pct:.0f}% of its memory roof ({roof.roof}), "
            f"which allows {ms(roof.roofline_ns)}"
        )
        data = {
            "of roof (%)": roof.of_roof_pct,
            "time (ns)": roof.time_ns,
            "roofline time (ns)": roof.roofline_ns,
            "bytes": roof.bytes,
            "achieved GB/s": roof.achieved_gbs,
            "roofs": roof.roof,
            **kernels,
        }
        return [Finding("optimizer-loop", stake, "optimizer 100%", evidence, fix, data=data)]
    if opt.empty:
        return []
    per_step, median = kernels["kernels per step"], kernels["median kernel (ns)"]
    if per_step < seen.th.optimizer_kernels or median >= seen.th.optimizer_median_ns:
        return []
    wall, busy, harness = (
        int((opt["end"] - opt["start"]).sum()),
        int(opt["busy"].sum()),
        int(opt["harness"].sum()),
    )
    evidence = (
        f"{len(opt)} optimizer steps launch {per_step:,.0f} kernels each, median {median / 1000:.1f} µs; "
        f"the steps take {ms(wall)}, the GPU is busy {ms(busy)} of it"
    )
    data = {
        "optimizer steps": len(opt),
        "wall (ns)": wall,
        "GPU busy (ns)": busy,
        "harness's part (ns)": harness,
        **kernels,
    }
    where = seen.place(opt["start"].to_numpy(), (opt["end"] - opt["start"]).to_numpy(), opt["pid"].to_numpy())
    return [Finding("optimizer-loop", max(wall - busy - harness, 0), where, evidence, fix, data=data)]


def exposed_communication(seen: Seen) -> list[Finding]:
    """Collectives with no computation beside them: the time of communication kernels (HTA's COMMUNICATION
    type) during which no compute kernel runs, the part of analysis.hta.breakdown.comm_comp_overlap that is
    not overlapped."""
    trace = seen.trace
    if not trace.has("kernels"):
        return []
    ev = gpu_events(trace)
    kind = types_of(ev)
    # each GPU of each process apart: another GPU's compute does not hide this one's collectives
    lanes = list(ev.groupby(["global_pid", "device"], observed=True).indices.items())
    per = [_exposed(ev, kind, rows) for _, rows in lanes]
    at = int(np.argmax([p[1] for p in per]))
    total, exposed, span, lo, hi = per[at]
    if not total or not span or exposed < seen.th.exposed_comm_share * span:
        return []
    pid, device = (int(v) for v in lanes[at][0])
    on = f"on device {device} of process {int(pid_of(pid))} (the most exposed of {len(lanes)} GPUs): "
    on *= len(lanes) > 1
    evidence = (
        f"{on}communication kernels run {ms(total)}, {ms(exposed)} of it ({100 * exposed / total:.1f}%) "
        f"with no computation beside it, {100 * exposed / span:.1f}% of the GPU's {ms(span)} span"
    )
    fix = (
        "overlap collectives with compute: DDP bucketing (bucket_cap_mb), gradient all-reduce during "
        "backward, FSDP prefetch (forward_prefetch, backward_prefetch); do not wait on a collective right "
        "after starting it"
    )
    data = {"communication (ns)": total, "exposed (ns)": exposed, "span (ns)": span}
    if len(lanes) > 1:
        data.update({"process": int(pid_of(pid)), "device": device, "GPUs": len(lanes)})
    return [
        Finding(
            "exposed-communication",
            exposed,
            seen.place(lo, hi - lo),
            evidence,
            fix,
            data=data,
        )
    ]


def _step_kernels(seen: Seen) -> pd.DataFrame:
    """The kernels that ran in the measured steps (all of them where the capture has no steps): start, end,
    pid, device, name."""
    trace = seen.trace
    k = trace.frame("kernels", ["start", "end", "global_pid", "device_id", "name_id"])
    names = trace.strings(k["name_id"].unique())
    k = pd.DataFrame(
        {
            "start": k["start"].to_numpy(),
            "end": k["end"].to_numpy(),
            "pid": k["global_pid"].to_numpy() & PROCESS_MASK,
            "device": k["device_id"].to_numpy(),
            "name": k["name_id"].map(names).astype(str),
        }
    )
    if len(seen.steps):
        k = k[seen.in_steps(k["start"].to_numpy(), k["pid"].to_numpy())]
    return k


def _names_with(k: pd.DataFrame) -> Callable[..., np.ndarray]:
    """Which kernels' names contain a pattern (str.contains' arguments), each distinct name tested once."""
    return lambda pattern, **how: label_test(k["name"], lambda labels: labels.str.contains(pattern, **how))


def _top(k: pd.DataFrame, n: int = 3) -> list[dict[str, object]]:
    per = (k["end"] - k["start"]).groupby(k["name"]).agg(["size", "sum"]).sort_values("sum", ascending=False)
    return [
        {"name": str(name), "kernels": int(r["size"]), "time (ns)": int(r["sum"])}
        for name, r in per.head(n).iterrows()
    ]


def fp32_gemm(seen: Seen) -> list[Finding]:
    """GEMMs computed in fp32 on a GPU whose tensor cores take bf16 or TF32: their kernels name their
    types (cuBLAS's `sgemm`, xmma's `f32f32_f32f32 … ffma`), and none of the steps' GEMMs is TF32 or bf16.
    Each GPU of each process apart, against its kernel time, the fp32 GEMMs' time as the union of theirs
    (kernels on several streams overlap): the time at stake is one GPU's, never more than the span its
    kernels ran in; the GPU with the most is said."""
    if not seen.trace.has("kernels"):
        return []
    k = _step_kernels(seen)
    named = _names_with(k)
    is_gemm = named(GEMM) & ~named(FUSED_ATTENTION)
    low_precision = named(LOW_PRECISION)
    is_fp32 = is_gemm & named(FP32_GEMM) & ~low_precision
    lanes = list(k.groupby(["pid", "device"], sort=True).indices.items())
    if not lanes or not is_fp32.any():  # none: nothing to say
        return []
    took = (k["end"] - k["start"]).to_numpy()
    per = [(_union(k, rows[is_fp32[rows]]), int(took[rows].sum())) for _, rows in lanes]
    at = int(np.argmax([stake for stake, _ in per]))
    (stake, total), (lane, rows) = per[at], lanes[at]
    if not total or not stake or stake < seen.th.fp32_gemm_share * total:
        return []
    fp32, low = k.iloc[rows[is_fp32[rows]]], k.iloc[rows[(is_gemm & low_precision)[rows]]]
    unknown = int((k["name"].iloc[rows] == "[Unknown]").sum())
    pid, device = (int(v) for v in lane)
    on = f"on device {device} of process {int(pid_of(pid))} (the most fp32 GEMM time of {len(lanes)} GPUs): "
    evidence = (
        f"{on * (len(lanes) > 1)}{len(fp32):,} fp32 GEMM kernels take {ms(stake)} of the {ms(total)} of "
        f"kernel time in the {'steps' if len(seen.steps) else 'capture'} ({100 * stake / total:.0f}%"
        f"{'' if len(seen.steps) else '; it has no steps'}); {len(low):,} GEMMs in bf16, fp16 or TF32"
    )
    if unknown:
        evidence += f" ({unknown:,} kernels nsys could not name are not counted)"
    fix = (
        "let the tensor cores take the matmuls: bf16 autocast (`--precision bf16`, torch.autocast('cuda', "
        "torch.bfloat16)) or TF32 (torch.backends.cuda.matmul.allow_tf32 = True, "
        "torch.set_float32_matmul_precision('high'))"
    )
    data = {
        "fp32 GEMM kernels": len(fp32),
        "fp32 GEMM time (ns)": stake,
        "kernel time (ns)": total,
        "low-precision GEMM kernels": len(low),
        "unnamed kernels": unknown,
        "top": _top(fp32),
    }
    if len(lanes) > 1:
        data.update({"process": int(pid_of(pid)), "device": device, "GPUs": len(lanes)})
    where = seen.place(
        fp32["start"].to_numpy(), (fp32["end"] - fp32["start"]).to_numpy(), fp32["pid"].to_numpy()
    )
    return [Finding("fp32-gemm", stake, where, evidence, fix, data=data)]


def _union(k: pd.DataFrame, rows: np.ndarray) -> int:
    """The time the kernels `rows` of `k` run, those that overlap counted once (ns)."""
    lo, hi = merge(k["start"].to_numpy()[rows], k["end"].to_numpy()[rows])
    return int((hi - lo).sum())


def math_attention_kernels(seen: Seen) -> list[Finding]:
    """Attention as separate kernels: softmax kernels in the steps (over the materialised scores), forward
    ones at least twice a step (attention runs one a layer; a classifier's softmax, once a step, is not
    attention), and no fused attention kernel (flash, memory-efficient, cuDNN)."""
    if not seen.trace.has("kernels"):
        return []
    k = _step_kernels(seen)
    named = _names_with(k)
    is_soft = named(SOFTMAX) & ~named(NOT_ATTENTION_SOFTMAX)
    soft = k[is_soft]
    fused = k[named(FUSED_ATTENTION)]
    forward = k[is_soft & ~named("backward", case=False)]
    if not len(seen.steps) or len(forward) < 2 * len(seen.steps) or len(fused):
        return []
    stake = int((soft["end"] - soft["start"]).sum())
    evidence = (
        f"{len(soft):,} softmax kernels in {len(seen.steps)} steps ({ms(stake)}) and no fused attention "
        "kernel (flash, memory-efficient, cuDNN): the scores are written out, softmaxed and read back"
    )
    fix = FIX_ATTENTION
    data = {
        "softmax kernels": len(soft),
        "softmax time (ns)": stake,
        "fused attention kernels": 0,
        "steps": len(seen.steps),
        "top": _top(soft),
    }
    where = seen.place(
        soft["start"].to_numpy(), (soft["end"] - soft["start"]).to_numpy(), soft["pid"].to_numpy()
    )
    return [Finding("math-attention", stake, where, evidence, fix, data=data)]
