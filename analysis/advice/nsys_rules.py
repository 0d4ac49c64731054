"""The six CUDA rules of Nsight Systems' expert system (`nsys analyze -r RULE`), as tables of a Trace.

Each rule gives the columns, headers and rows, in the same order, that `nsys analyze -r RULE -f csv` of
Nsight Systems 2022.4 prints (tests/test_nsys_rules.py holds them against its output on every shared
export). Written from what the rules are documented to find and checked against that output, not from
nsys's code:

- cuda-sync-api: cudaDeviceSynchronize / cudaStreamSynchronize calls, longest first.
- cuda-sync-memcpy: copies made by a synchronous cudaMemcpy* call (not *Async*) between pageable host
  memory and the device that the GPU started while the call still held the host (a pageable host-to-device
  copy that the driver only staged, the call returning before the GPU copied, blocks nobody and is not
  listed), longest first.
- cuda-async-memcpy: copies made by a cudaMemcpy*Async* call from or to pageable host memory (the driver
  runs them synchronously), longest first.
- cuda-sync-memset: memsets of pinned host or managed memory by a synchronous cudaMemset* call.
- gpu-starv: per process and device, the idle gaps between GPU work (kernels, copies, memsets, and nsys's
  own CUDA flush overhead, which the user cannot remove) longer than `gap` ms, longest first.
- gpu-low-util: per process and device, the span from the first to the last GPU work cut into `chunks`
  equal chunks; chunks in use less than `threshold` percent, consecutive ones merged (their size-weighted
  mean), least used first.

What nsys does that these keep: names match as SQL's LIKE does (case-insensitive; the recorded name, so
an export that records every runtime call twice, `cudaMemcpy` and `cudaMemcpy_v3020`, lists each copy
twice); a GPU operation joins its launching call by process and correlationId (correlationIds are unique
within a process only); a rule is skipped, not empty, when the export lacks a table it reads.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.errors import AnalysisError
from analysis.trace import Trace

PID_MASK = 0xFFFFFF
# nsys's memory kinds (ENUM_CUDA_MEM_KIND); the trace model stores them + 1 (0: unknown)
MEM_KIND = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
    7: "Unknown",
}
PAGEABLE, PINNED, MANAGED = 1, 2, 5  # in the trace model's numbering
FLUSH_OVERHEAD = (
    "CUDA profiling data flush overhead",
    "CUDA profiling stop overhead",
    "CUDA profiling overhead",
)
MEMOP_HEADERS = [
    "Duration (ns)",
    "Start (ns)",
    "Src Kind",
    "Dst Kind",
    "Bytes (MB)",
    "PID",
    "Device ID",
    "Context ID",
    "Stream ID",
    "API Name",
]
MEMSET_HEADERS = [
    "Duration (ns)",
    "Start (ns)",
    "Memory Kind",
    "Bytes (MB)",
    "PID",
    "Device ID",
    "Context ID",
    "Stream ID",
    "API Name",
]
SYNC_HEADERS = ["Duration (ns)", "Start (ns)", "PID", "TID", "API Name"]
GAP_HEADERS = ["Row#", "Duration (ns)", "Start (ns)", "PID", "Device ID", "Context ID"]
UTIL_HEADERS = ["Row#", "In-Use (%)", "Duration (ns)", "Start (ns)", "PID", "Device ID", "Context ID"]


@dataclass(frozen=True)
class Rule:
    """One rule: its name, what it finds, the frames it needs (any of `needs_any`), its options."""

    name: str
    title: str
    needs: tuple[str, ...]
    run: Callable[..., pd.DataFrame]
    options: dict[str, int] = field(default_factory=dict)
    needs_any: tuple[str, ...] = ()


class Skipped(AnalysisError):
    """nsys skips a rule when the export lacks the data it reads: say so, in one line."""


def like(pattern: str) -> re.Pattern[str]:
    """SQL LIKE as SQLite has it (case-insensitive, % any run, _ one character) as a regex."""
    parts = (".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


def _names(trace: Trace, ids: pd.Series, keep: Callable[[str], bool]) -> dict[int, str]:
    return {i: s for i, s in trace.strings(ids.unique()).items() if keep(s)}


def _pid(global_id: pd.Series | np.ndarray) -> np.ndarray:
    return (np.asarray(global_id) >> 24) & PID_MASK


def _context_of(trace: Trace) -> dict[tuple[int, int], int]:
    """(process id, device) -> CUDA context (nsys's contexts: one per process and device)."""
    ctx = trace.frame("contexts")
    return {
        (int(p), int(d)): int(c)
        for p, d, c in zip(_pid(ctx["global_pid"]), ctx["device_id"], ctx["context_id"], strict=True)
    }


def _longest_first(df: pd.DataFrame, rows: int) -> pd.DataFrame:
    """nsys's ORDER BY duration DESC LIMIT rows; ties keep the order of the source table."""
    out = df.sort_values("Duration (ns)", ascending=False, kind="stable")
    return out.head(rows).reset_index(drop=True) if rows >= 0 else out.reset_index(drop=True)


def _mb(nbytes: pd.Series) -> pd.Series:
    """Bytes as nsys prints MB: three decimals (text, so csv keeps them as printed)."""
    return nbytes.map(lambda b: f"{b / 1e6:.3f}")


def sync_api(trace: Trace, rows: int = 50) -> pd.DataFrame:
    """cuda-sync-api: calls that block the host until the device (or a stream) is done."""
    calls = trace.frame("runtime", ["start", "end", "global_tid", "name_id"])
    sync = (like("cudaDeviceSynchronize%"), like("cudaStreamSynchronize%"))
    names = _names(trace, calls["name_id"], lambda s: any(p.fullmatch(s) for p in sync))
    calls = calls[calls["name_id"].isin(list(names))]
    out = pd.DataFrame(
        {
            "Duration (ns)": calls["end"] - calls["start"],
            "Start (ns)": calls["start"],
            "PID": _pid(calls["global_tid"]),
            "TID": calls["global_tid"].to_numpy() & PID_MASK,
            "API Name": calls["name_id"].map(names),
        }
    )
    return _longest_first(out, rows)


def _with_calls(trace: Trace, frame: str, columns: list[str], name_ok: Callable[[str], bool]) -> pd.DataFrame:
    """Rows of `frame` joined with their launching calls whose names pass (one row per such call), by
    process and correlationId; `call_start`, `call_end`, `api` added."""
    ops = trace.frame(frame, ["start", "end", "correlation_id", "global_pid", *columns])
    ops = ops.assign(pid=_pid(ops["global_pid"]), row=np.arange(len(ops)))
    calls = trace.frame("runtime", ["start", "end", "correlation_id", "global_tid", "name_id"])
    names = _names(trace, calls["name_id"], name_ok)
    calls = calls[calls["name_id"].isin(list(names))]
    calls = pd.DataFrame(
        {
            "correlation_id": calls["correlation_id"],
            "pid": _pid(calls["global_tid"]),
            "call_start": calls["start"],
            "call_end": calls["end"],
            "api": calls["name_id"].map(names),
        }
    )
    joined = ops.merge(calls, on=["pid", "correlation_id"], how="inner")
    return joined.sort_values("row", kind="stable")


def _memop_rows(trace: Trace, joined: pd.DataFrame, kinds: list[tuple[str, str]]) -> pd.DataFrame:
    ctx = _context_of(trace)
    out = {"Duration (ns)": joined["end"] - joined["start"], "Start (ns)": joined["start"]}
    for header, col in kinds:
        out[header] = joined[col].map(lambda k: MEM_KIND.get(int(k) - 1, MEM_KIND[7]))
    out |= {
        "Bytes (MB)": _mb(joined["bytes"]),
        "PID": joined["pid"],
        "Device ID": joined["device_id"],
        "Context ID": [
            ctx.get((int(p), int(d)), 0) for p, d in zip(joined["pid"], joined["device_id"], strict=True)
        ],
        "Stream ID": joined["stream_id"],
        "API Name": joined["api"],
    }
    return pd.DataFrame(out)


def async_memcpy(trace: Trace, rows: int = 50) -> pd.DataFrame:
    """cuda-async-memcpy: async copies from or to pageable host memory (they run synchronously)."""
    cols = ["src_kind", "dst_kind", "bytes", "device_id", "stream_id"]
    joined = _with_calls(trace, "memcpy", cols, like("cudaMemcpy%Async%").fullmatch)
    joined = joined[(joined["src_kind"] == PAGEABLE) | (joined["dst_kind"] == PAGEABLE)]
    return _longest_first(
        _memop_rows(trace, joined, [("Src Kind", "src_kind"), ("Dst Kind", "dst_kind")]), rows
    )


def _synchronous(name: str) -> bool:
    return like("cudaMemcpy%").fullmatch(name) is not None and like("%async%").fullmatch(name) is None


def sync_memcpy(trace: Trace, rows: int = 50) -> pd.DataFrame:
    """cuda-sync-memcpy: copies by synchronous calls that held the host while the GPU copied."""
    cols = ["src_kind", "dst_kind", "bytes", "device_id", "stream_id"]
    joined = _with_calls(trace, "memcpy", cols, _synchronous)
    pageable = (joined["src_kind"] == PAGEABLE) | (joined["dst_kind"] == PAGEABLE)
    joined = joined[pageable & (joined["start"] < joined["call_end"])]
    return _longest_first(
        _memop_rows(trace, joined, [("Src Kind", "src_kind"), ("Dst Kind", "dst_kind")]), rows
    )


def sync_memset(trace: Trace, rows: int = 50) -> pd.DataFrame:
    """cuda-sync-memset: memsets of pinned host or managed memory by synchronous calls."""

    def synchronous(name: str) -> bool:
        return like("cudaMemset%").fullmatch(name) is not None and like("%async%").fullmatch(name) is None

    joined = _with_calls(trace, "memset", ["mem_kind", "bytes", "device_id", "stream_id"], synchronous)
    joined = joined[joined["mem_kind"].isin([PINNED, MANAGED])]
    out = _memop_rows(trace, joined, [("Memory Kind", "mem_kind")])
    return _longest_first(out[MEMSET_HEADERS], rows)


# --- GPU time: gaps and utilisation ----------------------------------------------------------------------


def gpu_ops(trace: Trace) -> pd.DataFrame:
    """GPU work per process and device (start, end, pid, device): kernels, copies, memsets that have a
    start, and nsys's CUDA flush overhead of the process strictly inside each device's span of work."""
    parts = [
        trace.frame(f, ["start", "end", "global_pid", "device_id"])
        for f in ("kernels", "memcpy", "memset")
        if trace.has(f)
    ]
    if not parts:
        return pd.DataFrame({c: np.empty(0, np.int64) for c in ("start", "end", "pid", "device")})
    ops = pd.concat(parts, ignore_index=True)
    ops = ops[ops["start"] > 0]
    ops = pd.DataFrame(
        {"start": ops["start"], "end": ops["end"], "pid": _pid(ops["global_pid"]), "device": ops["device_id"]}
    )
    if trace.has("overhead"):
        over = trace.frame("overhead", ["start", "end", "global_tid", "name_id"])
        names = _names(trace, over["name_id"], lambda s: s in FLUSH_OVERHEAD)
        over = over[over["name_id"].isin(list(names))]
        over = pd.DataFrame({"start": over["start"], "end": over["end"], "pid": _pid(over["global_tid"])})
        span = (
            ops.groupby(["pid", "device"], sort=False)
            .agg(lo=("start", "min"), hi=("end", "max"))
            .reset_index()
        )
        inside = over.merge(span, on="pid")
        inside = inside[(inside["start"] > inside["lo"]) & (inside["end"] < inside["hi"])]
        ops = pd.concat([ops, inside[["start", "end", "pid", "device"]]], ignore_index=True)
    return ops.reset_index(drop=True)


def gpu_gaps(trace: Trace, gap_ms: int = 500, rows: int = 50) -> pd.DataFrame:
    """gpu-starv: idle gaps of each process's device longer than `gap_ms`, longest first."""
    ctx = _context_of(trace)
    found = []
    for (pid, device), ops in gpu_ops(trace).groupby(["pid", "device"], sort=True):
        starts, ends = np.sort(ops["start"].to_numpy()), np.sort(ops["end"].to_numpy())
        lo, hi = ends[:-1], starts[1:]  # each end with the next start: a gap where nothing runs
        dur = hi - lo
        keep = (dur > gap_ms * 1_000_000) & (lo < hi)
        found.append(
            pd.DataFrame(
                {
                    "Duration (ns)": dur[keep],
                    "Start (ns)": lo[keep],
                    "PID": pid,
                    "Device ID": device,
                    "Context ID": ctx.get((int(pid), int(device)), 0),
                }
            )
        )
    out = pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=GAP_HEADERS[1:])
    out = out.sort_values(["Duration (ns)", "Start (ns)"], ascending=[False, True], kind="stable")
    if rows >= 0:
        out = out.head(rows)
    out.insert(0, "Row#", np.arange(1, len(out) + 1))
    return out.reset_index(drop=True)[GAP_HEADERS]


def _round1(x: float) -> float:
    return math.floor(x * 10 + 0.5) / 10


def gpu_low_util(trace: Trace, threshold: int = 50, chunks: int = 30, rows: int = 50) -> pd.DataFrame:
    """gpu-low-util: equal chunks of each process's device span in use less than `threshold` percent."""
    if not 1 <= chunks <= 1000:
        raise AnalysisError(f"gpu-low-util: chunks must be between 1 and 1000, not {chunks}")
    ctx = _context_of(trace)
    found = []
    for (pid, device), ops in gpu_ops(trace).groupby(["pid", "device"], sort=True):
        s, e = ops["start"].to_numpy(), ops["end"].to_numpy()
        lo, hi = int(s.min()), int(e.max())
        size = math.ceil(float(hi - lo) / chunks)
        groups: list[list[tuple[int, int, float]]] = []
        last = -2
        for i in range(chunks):
            cs, ce = i * size + lo, min(i * size + lo + size, hi)
            if not cs < ce:
                continue
            inside = (s < ce) & (e > cs)
            busy = float((np.minimum(e[inside], ce) - np.maximum(s[inside], cs)).sum())
            pct = busy / (ce - cs) * 100
            if pct < threshold:
                if i != last + 1 or not groups:
                    groups.append([])
                groups[-1].append((cs, ce, pct))
                last = i
        for g in groups:
            start, end = g[0][0], g[-1][1]
            avg = sum((ce - cs) * p for cs, ce, p in g) / sum(ce - cs for cs, ce, _ in g)
            found.append(
                {
                    "In-Use (%)": _round1(avg),
                    "Duration (ns)": end - start,
                    "Start (ns)": start,
                    "PID": pid,
                    "Device ID": device,
                    "Context ID": ctx.get((int(pid), int(device)), 0),
                }
            )
    out = pd.DataFrame(found, columns=UTIL_HEADERS[1:])
    out = out.sort_values(["In-Use (%)", "Duration (ns)"], kind="stable")
    if rows >= 0:
        out = out.head(rows)
    out.insert(0, "Row#", np.arange(1, len(out) + 1))
    out["In-Use (%)"] = out["In-Use (%)"].map(lambda v: f"{v:.1f}")
    return out.reset_index(drop=True)[UTIL_HEADERS]


GPU_WORK = ("kernels", "memcpy", "memset")
RULES: dict[str, Rule] = {
    r.name: r
    for r in (
        Rule(
            "cuda-async-memcpy", "CUDA Async Memcpy with Pageable Memory", ("runtime", "memcpy"), async_memcpy
        ),
        Rule("cuda-sync-api", "CUDA Synchronization APIs", ("runtime",), sync_api),
        Rule("cuda-sync-memcpy", "CUDA Synchronous Memcpy", ("runtime", "memcpy"), sync_memcpy),
        Rule("cuda-sync-memset", "CUDA Synchronous Memset", ("runtime", "memset"), sync_memset),
        Rule(
            "gpu-low-util",
            "GPU Low Utilization",
            (),
            gpu_low_util,
            {"threshold": 50, "chunks": 30},
            needs_any=GPU_WORK,
        ),
        Rule("gpu-starv", "GPU Starvation", (), gpu_gaps, {"gap": 500}, needs_any=GPU_WORK),
    )
}


def parse_rule(spec: str) -> tuple[Rule, dict[str, int]]:
    """`NAME[:option=value[:option=value]]`, as nsys takes it, -> (rule, options with defaults)."""
    name, *opts = spec.split(":")
    if name not in RULES:
        raise AnalysisError(f"unknown rule {name!r}: one of {', '.join(RULES)}")
    rule = RULES[name]
    options = {"rows": 50, **rule.options}
    for opt in opts:
        key, eq, value = opt.partition("=")
        if key not in options:
            raise AnalysisError(f"rule {name} has no option {key!r}: options {', '.join(options)}")
        try:
            options[key] = int(value) if eq else int("x")
        except ValueError:
            raise AnalysisError(f"rule {name}: option {key} takes an integer, not {value!r}") from None
    return rule, options


def run_rule(trace: Trace, spec: str) -> pd.DataFrame:
    """The table `nsys analyze -r SPEC` prints for `trace`, or Skipped saying what the export lacks."""
    rule, options = parse_rule(spec)
    exists = trace.meta.get("exists", {})
    if trace.format != "nsys-sqlite":
        raise Skipped(f"{rule.name}: nsys's rules read nsys exports; {trace.path} is a {trace.format} trace")
    lacking = [f for f in rule.needs if not exists.get(f, trace.has(f))]
    if rule.needs_any and not any(exists.get(f, trace.has(f)) for f in rule.needs_any):
        lacking.append("kernels, memory copies or memsets")
    if lacking:
        raise Skipped(f"{rule.name} skipped: {trace.path} has no {' or '.join(lacking)} (nsys skips it too)")
    kwargs = {"gap_ms" if k == "gap" else k: v for k, v in options.items()}
    out = rule.run(trace, **kwargs)
    out.attrs["title"] = rule.title
    return out
