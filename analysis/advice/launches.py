"""A capture's kernel and graph launch calls, each with the GPU work it launched (kernels, copies and sets
with the same process and correlation id), and that GPU work: what analysis.advice.coverage lines up per
step to tell a trace of GPU work that stopped part way."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analysis.joins.runtime import runtime_calls
from analysis.readers.global_ids import PROCESS_MASK
from analysis.stats import member, pair_keys
from analysis.trace.frames import GPU_WORK
from analysis.trace.trace import Trace

# calls that launch one kernel each (their versioned and per-thread-stream forms too: _v7000, _ptsz)
KERNEL_LAUNCHES = frozenset({
    "cudaLaunch", "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cuLaunch", "cuLaunchGrid", "cuLaunchGridAsync",
    "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernelMultiDevice",
    "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel",
})  # fmt: skip
# calls that launch a whole graph: many kernels under one correlation id, or none where nsys traces graphs
# as a whole (--cuda-graph-trace=graph writes them to a table of their own)
GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
# between these on one thread, launches are recorded into a graph, not run (torch.cuda.graph captures so)
CAPTURE_BEGINS = frozenset({"cudaStreamBeginCapture", "cudaStreamBeginCaptureToGraph", "cuStreamBeginCapture",
                            "cuStreamBeginCaptureToGraph", "hipStreamBeginCapture"})  # fmt: skip
CAPTURE_ENDS = frozenset({"cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture"})
SUFFIX = re.compile(r"(?:_v\d+|_ptsz|_ptds)+$")


def base_name(name: str) -> str:
    """A CUDA call's name without its version and per-thread-stream suffixes: cudaLaunchKernel_v7000 ->
    cudaLaunchKernel, cudaLaunchKernelExC_v11060 -> cudaLaunchKernelExC."""
    return SUFFIX.sub("", name)


def launches(trace: Trace) -> pd.DataFrame:
    """Every kernel or graph launch call: start, end, pid, correlation_id, name, graph (bool), work (GPU
    events with its process and correlation id), work_end (the last of them to end, 0 without). Kernel
    launches made while their thread captures a stream into a CUDA graph are left out: they run only as
    part of the graph, under its launch's correlation id (on an H200, the doctor's self-test program: 2 of
    its 15 launch calls, which failed the capture's GPU coverage though every kernel ran)."""
    if not trace.has("runtime"):
        i64 = np.empty(0, np.int64)
        return pd.DataFrame(
            {"start": i64, "end": i64, "pid": i64, "correlation_id": i64, "name": np.empty(0, object),
             "graph": np.empty(0, bool), "work": i64, "work_end": i64}
        )  # fmt: skip
    calls = runtime_calls(trace)  # a call recorded twice (cudaLaunchKernel and its _v7000) counts once
    ids = calls["name_id"].to_numpy()
    names = {i: base_name(n) for i, n in trace.strings(calls["name_id"].unique()).items()}

    def named(wanted: frozenset[str]) -> np.ndarray:  # by string id: no name per call (6M calls)
        return member(ids, np.array([i for i, n in names.items() if n in wanted], dtype=np.int64))

    keep = named(KERNEL_LAUNCHES | GRAPH_LAUNCHES)
    keep &= ~_captured(calls, named(CAPTURE_BEGINS), named(CAPTURE_ENDS))
    out = pd.DataFrame(
        {
            "start": calls["start"].to_numpy()[keep],
            "end": calls["end"].to_numpy()[keep],
            "pid": calls["global_tid"].to_numpy()[keep] & PROCESS_MASK,
            "correlation_id": calls["correlation_id"].to_numpy()[keep],
            "name": pd.Series(ids[keep]).map(names).to_numpy(),
        }
    )
    out["graph"] = out["name"].isin(GRAPH_LAUNCHES)
    out["work"], out["work_end"] = _work_of(out, gpu_work(trace))
    return out.sort_values("start", kind="stable").reset_index(drop=True)


def _work_of(calls: pd.DataFrame, work: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per call, the GPU events with its process and correlation id, and the last of their ends (0 without
    any): the events sorted by one int64 key each and searched, not grouped and merged by two columns."""
    count, last = np.zeros(len(calls), dtype=np.int64), np.zeros(len(calls), dtype=np.int64)
    if not len(work) or not len(calls):
        return count, last
    call_key, work_key = pair_keys(
        calls["pid"].to_numpy(), calls["correlation_id"].to_numpy(),
        work["pid"].to_numpy(), work["correlation_id"].to_numpy(),
    )  # fmt: skip
    order = np.argsort(work_key, kind="stable")
    keys, ends = work_key[order], work["end"].to_numpy(dtype=np.int64)[order]
    first = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    group_end = np.maximum.reduceat(ends, first)
    lo, hi = np.searchsorted(keys, call_key, "left"), np.searchsorted(keys, call_key, "right")
    count = hi - lo
    has = count > 0
    last[has] = group_end[np.searchsorted(first, lo[has], "right") - 1]
    return count.astype(np.int64), last


def _captured(calls: pd.DataFrame, begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which calls a thread made between its stream capture's begin and end (both recorded: a capture whose
    end is missing hides nothing); `begins`, `ends`: which calls begin and end a capture."""
    out = np.zeros(len(calls), dtype=bool)
    if not begins.any():
        return out
    tid, start = calls["global_tid"].to_numpy(), calls["start"].to_numpy()
    end = calls["end"].to_numpy()
    for t in np.unique(tid[begins]):
        on = tid == t
        stops = np.sort(end[ends & on])
        for begin in start[begins & on]:
            j = np.searchsorted(stops, begin)
            if j < len(stops):
                out |= on & (start > begin) & (start < stops[j])
    return out


def gpu_work(trace: Trace) -> pd.DataFrame:
    """Kernels, copies and sets: kind, start, end, pid (of the launching process), correlation_id."""
    frames = [f for f in GPU_WORK if trace.has(f)]
    if not frames:
        return pd.DataFrame({"kind": [], "start": [], "end": [], "pid": [], "correlation_id": []})
    parts = [trace.frame(f, ["start", "end", "correlation_id", "global_pid"]) for f in frames]
    return pd.DataFrame(
        {  # the kind as a category: no string per event (1.3M)
            "kind": pd.Categorical.from_codes(
                np.repeat(np.arange(len(frames)), [len(p) for p in parts]), categories=frames
            ),
            "start": np.concatenate([p["start"].to_numpy() for p in parts]),
            "end": np.concatenate([p["end"].to_numpy() for p in parts]),
            "pid": np.concatenate([p["global_pid"].to_numpy() for p in parts]) & PROCESS_MASK,
            "correlation_id": np.concatenate([p["correlation_id"].to_numpy() for p in parts]),
        }
    )
