"""Every GPU event on a stream as one frame, HTA's kernel types, and interval unions over them.

What Holistic Trace Analysis (HTA) calls "GPU kernels" is every event with a stream: kernels, memory copies
and sets, and CUDA synchronization events (a Kineto trace's cuda_sync `Stream Wait Event`, `Stream Sync`,
`Context Sync`). `gpu_events` gives them with names as Kineto spells them, so the breakdown tables
(analysis.hta.breakdown) classify them by name exactly as HTA does:

- COMMUNICATION: names matching `^nccl.*Kernel`;
- MEMORY: `^Memcpy`, `^Memset` or `^dma`;
- COMPUTATION: the rest, except names matching `.*Sync` or containing Memcpy/Memset, which are OTHER (HTA
  0.5.0 counts `Stream Wait Event` as COMPUTATION; 0.6 no longer does).

`device_times` splits each device's span by those kinds (compute, communication exposed and overlapped,
memory, other, idle), as `harness diff` of two exports shows it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.errors import ExportError
from analysis.readers import COPY_KINDS, MEMORY_KINDS
from analysis.trace.multi import rank_in_name
from analysis.trace.trace import NULL, Trace

COMPUTATION, COMMUNICATION, MEMORY, OTHER = "COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER"
KERNEL_TYPES = (COMPUTATION, COMMUNICATION, MEMORY)  # HTA's order in "A overlapping B" labels
COMM_RE = re.compile(r"^nccl.*Kernel")
MEMORY_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
KINDS = ("kernel", "memcpy", "memset", "sync")
COPY_NAMES = {v: k for k, v in COPY_KINDS.items()}
MEMORY_NAMES = {v: k for k, v in MEMORY_KINDS.items()}
EVENT_COLUMNS = ["kind", "name", "start", "end", "stream", "correlation_id", "global_pid", "device"]


def kernel_type(name: str) -> str:
    """HTA's class of a GPU event, from its name."""
    if COMM_RE.match(name):
        return COMMUNICATION
    if MEMORY_RE.match(name):
        return MEMORY
    if not NOT_COMPUTE_RE.match(name):
        return COMPUTATION
    return OTHER


def memcpy_name(copy_kind: int, src_kind: int, dst_kind: int) -> str:
    """Kineto's name of a copy: `Memcpy HtoD (Pageable -> Device)`."""
    kind = COPY_NAMES.get(int(copy_kind), "Unknown")
    src, dst = MEMORY_NAMES.get(int(src_kind), "Unknown"), MEMORY_NAMES.get(int(dst_kind), "Unknown")
    return f"Memcpy {kind} ({src} -> {dst})"


def memset_name(mem_kind: int) -> str:
    return f"Memset ({MEMORY_NAMES.get(int(mem_kind), 'Unknown')})"


def rank_of(trace: Trace) -> int:
    """The trace's rank: the one it records (a Kineto trace's distributedInfo.rank, or the rank of one
    process's view of a capture of several: analysis.ranks.capture_ranks.process_ranks), else rank<R> in its
    file name; 0 when it has neither (an nsys export keeps no rank)."""
    rank = trace.meta.get("rank")
    if type(rank) is int:  # not a bool
        return rank
    named = rank_in_name(trace.path)
    return named if named is not None else 0


def gpu_events(trace: Trace) -> pd.DataFrame:
    """Kernels, copies, sets and sync events that ran on a stream (EVENT_COLUMNS; kind and name as
    categories), in that order and each kind in the trace's order. `attrs["types"]`: name -> kernel type."""
    common = ["start", "end", "stream_id", "correlation_id", "global_pid", "device_id"]
    parts: list[pd.DataFrame] = []
    names: list[tuple[np.ndarray, list[str]]] = []  # per part: each row's code into its names, the names
    if trace.has("kernels"):
        k = trace.frame("kernels", [*common, "name_id"])
        parts.append(k)
        names.append(_named_ids(trace, k["name_id"]))
    if trace.has("memcpy"):
        m = trace.frame("memcpy", [*common, "copy_kind", "src_kind", "dst_kind"])
        parts.append(m)
        keys = m[["copy_kind", "src_kind", "dst_kind"]].to_numpy()
        distinct, codes = np.unique(keys, axis=0, return_inverse=True) if len(m) else (keys, np.empty(0, int))
        names.append((codes.reshape(-1), [memcpy_name(*key) for key in distinct]))
    if trace.has("memset"):
        s = trace.frame("memset", [*common, "mem_kind"])
        parts.append(s)
        codes, kinds = pd.factorize(s["mem_kind"])
        names.append((codes, [memset_name(kind) for kind in kinds]))
    if trace.has("syncs"):
        y = trace.frame("syncs", [*common, "name_id"])
        parts.append(y)
        names.append(_named_ids(trace, y["name_id"]))
    kinds = [k for k, f in zip(KINDS, ("kernels", "memcpy", "memset", "syncs"), strict=True) if trace.has(f)]
    if not parts:
        hint = trace.meta.get("hints", {}).get("kernels", "record CUDA activity")
        raise ExportError(f"no GPU kernels, copies or sets in {trace.path}: {hint}")
    out = pd.DataFrame(
        {
            "kind": pd.Categorical.from_codes(
                np.repeat([KINDS.index(k) for k in kinds], [len(p) for p in parts]), categories=list(KINDS)
            ),
            "name": _categories(names),
            "start": np.concatenate([p["start"].to_numpy() for p in parts]),
            "end": np.concatenate([p["end"].to_numpy() for p in parts]),
            "stream": np.concatenate([p["stream_id"].to_numpy() for p in parts]),
            "correlation_id": np.concatenate([p["correlation_id"].to_numpy() for p in parts]),
            "global_pid": np.concatenate([p["global_pid"].to_numpy() for p in parts]),
            "device": np.concatenate([p["device_id"].to_numpy() for p in parts]),
        }
    )
    on_stream = (out["stream"] != NULL) & (out["stream"] != -1)  # HTA: stream -1 is not GPU work
    if not on_stream.all():  # no copy of every event where all are on a stream
        out = out[on_stream.to_numpy()].reset_index(drop=True)
    out.attrs["types"] = {n: kernel_type(n) for n in out["name"].cat.categories}
    return out


def _named_ids(trace: Trace, ids: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Rows' string ids as codes into their names, each id looked up once (an id without one: "")."""
    codes, distinct = pd.factorize(ids)
    known = trace.strings(distinct)
    return codes, ["" if pd.isna(n := known.get(i)) else str(n) for i in distinct]


def _categories(parts: list[tuple[np.ndarray, list[str]]]) -> pd.Categorical:
    """The rows' names of every part as one categorical, its categories sorted (as pd.Categorical of the
    names themselves sorts them), built from the codes: no string per row (1M kernels)."""
    parts = [(c, [*labels, ""] if (c < 0).any() else labels) for c, labels in parts]  # -1: no name, ""
    categories = sorted({n for _, labels in parts for n in labels})  # every one names some row
    at = {n: i for i, n in enumerate(categories)}
    codes = [np.array([at[n] for n in labels], dtype=np.int64)[c] for c, labels in parts]
    return pd.Categorical.from_codes(
        np.concatenate(codes) if codes else np.empty(0, np.int64),
        dtype=pd.CategoricalDtype(pd.Index(categories, dtype="str")),
    )


def types_of(events: pd.DataFrame) -> np.ndarray:
    """Each event's kernel type."""
    return events["name"].map(events.attrs["types"]).to_numpy(dtype=object)


def merge(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as disjoint (start, end) in time order; touching intervals merge (HTA's
    merge_kernel_intervals)."""
    if not len(start):
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    order = np.argsort(start, kind="stable")
    s, e = np.asarray(start)[order], np.asarray(end)[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first)


def sweep(unions: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Overlap of several unions: (state, from, to) for every stretch of time, state the bitmask of the
    unions (1 << position) covering it (0: none)."""
    times, steps = [], []
    for bit, (s, e) in enumerate(unions):
        times += [s, e]
        steps += [np.full(len(s), 1 << bit, dtype=np.int64), np.full(len(e), -(1 << bit), dtype=np.int64)]
    t = np.concatenate(times) if times else np.empty(0, dtype=np.int64)
    d = np.concatenate(steps) if steps else np.empty(0, dtype=np.int64)
    order = np.argsort(t, kind="stable")
    t, state = t[order], np.cumsum(d[order])
    return state[:-1], t[:-1], t[1:]


@dataclass(frozen=True)
class DeviceTime:
    """One device's GPU time (ns). compute + comm_exposed + memory + other + idle = span."""

    device: int
    kernel_ns: int  # sum of kernel durations
    kernels: int
    busy_ns: int  # union of every GPU event
    span_ns: int  # first GPU event's start to the last one's end
    compute: int
    comm_exposed: int
    comm_overlapped: int
    memory: int
    other: int
    idle: int


def device_times(events: pd.DataFrame) -> list[DeviceTime]:
    """Per device (in device order), from `analysis.hta.gpu_events.gpu_events` rows."""
    out = []
    kind = types_of(events) if len(events) else np.empty(0, dtype=object)
    is_kernel = (events["kind"] == "kernel").to_numpy()
    for device in np.unique(events["device"].to_numpy()):
        on = (events["device"] == device).to_numpy()
        start, end, k = events["start"].to_numpy()[on], events["end"].to_numpy()[on], kind[on]
        # the union of each type; state bits: 1 compute, 2 communication, 4 memory, 8 other (syncs)
        masks = [k == t for t in (COMPUTATION, COMMUNICATION, MEMORY)]
        masks.append(~(masks[0] | masks[1] | masks[2]))
        state, lo, hi = sweep([merge(start[m], end[m]) for m in masks])
        length = hi - lo

        def part(mask: np.ndarray, length: np.ndarray = length) -> int:
            return int(length[mask].sum())

        kernels = is_kernel[on]
        out.append(
            DeviceTime(
                device=int(device),
                kernel_ns=int((end[kernels] - start[kernels]).sum()),
                kernels=int(kernels.sum()),
                busy_ns=part(state > 0),
                span_ns=int(end.max() - start.min()),
                compute=part((state & 1) > 0),
                comm_exposed=part(((state & 2) > 0) & ((state & 1) == 0)),
                comm_overlapped=part(((state & 2) > 0) & ((state & 1) > 0)),
                memory=part(((state & 4) > 0) & ((state & 3) == 0)),
                other=part(state == 8),
                idle=part(state == 0),
            )
        )
    return out
