"""What the GPU self-test of `harness doctor` looks for in its capture, and what it says nsys lost.

The self-test program (harness.experiments.selftest) runs, each inside an NVTX range of its own, a kernel,
a cuBLAS matrix product and the replay of a CUDA graph. A capture that traces this GPU holds for each one a
kernel, the CUDA API call that launched it (cudaLaunchKernel…, cuLaunchKernel…, cudaGraphLaunch…) inside the
range, and a name nsys could resolve. What is missing is named: the range (no NVTX), the launch calls (no CUDA
API trace), the kernel (launched but never recorded: the H100 capture of nsys 2022.4 had 3 API calls and 0
kernels), or its name (`[Unknown]`: nsys 2023.4 could not name 72 % of the GPU time of a CUDA 13 program).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from analysis.errors import ExportError
from analysis.joins.nvtx_ranges import all_ranges
from analysis.joins.runtime import GRAPH_LAUNCHES, runtime_calls
from analysis.readers.global_ids import pid_of
from analysis.tables.range_kernels import kernels_in_ranges
from analysis.trace.trace import Trace

KERNEL_LAUNCH = ("cudaLaunch", "cuLaunch")  # cudaLaunchKernel(_v7000, ExC_v11060), cuLaunchKernel(Ex), …
UNNAMED = frozenset({"", "[Unknown]"})


@dataclass(frozen=True)
class Expected:
    """One piece of GPU work of the self-test: what it is, the NVTX range it runs in, the API calls that
    launch its kernels (name prefixes), and a pattern its kernel's name matches (None: any name)."""

    what: str
    range: str
    launched_by: tuple[str, ...] = KERNEL_LAUNCH
    named: str | None = None


EXPECTED = (
    Expected("a kernel", "doctor:kernel"),
    # cuBLAS's kernels: sm80_xmma_gemm_…_cublas, ampere_sgemm_…, cutlass_…gemm…, gemv2T_kernel…
    Expected("a cuBLAS matrix product", "doctor:cublas", named=r"gemm|gemv|cublas"),
    Expected("a CUDA graph replay", "doctor:graph", launched_by=GRAPH_LAUNCHES),
)


@dataclass(frozen=True)
class Seen:
    """What the capture holds of one Expected: ok, or what nsys lost, in one line."""

    what: str
    ok: bool
    detail: str


def _calls_in(trace: Trace, spans: list[tuple[int, int, int]], prefixes: tuple[str, ...]) -> int:
    """CUDA API calls named with one of `prefixes` that start inside one of `spans` (start, end, pid)."""
    if not trace.has("runtime"):
        return 0
    calls = runtime_calls(trace)
    names = calls.attrs["names"]
    wanted = [i for i, name in names.items() if name.startswith(prefixes)]
    calls = calls[calls["name_id"].isin(wanted)]
    start, pid = calls["start"].to_numpy(), pid_of(calls["global_tid"].to_numpy())
    inside = np.zeros(len(calls), dtype=bool)
    for lo, hi, p in spans:
        inside |= (start >= lo) & (start <= hi) & (pid == p)
    return int(inside.sum())


def check(trace: Trace, expected: Expected) -> Seen:
    """Whether the capture holds `expected`: a kernel launched inside its range by one of its calls, with a
    name nsys resolved (matching its pattern); else what is missing."""
    what, where = expected.what, expected.range
    ranges = all_ranges(trace) if trace.has("nvtx") else None
    if ranges is None or not (ranges["name"] == where).any():
        return Seen(what, False, f"no NVTX range {where!r} in the export: nsys recorded no NVTX of it")
    picked = ranges[ranges["name"] == where]
    spans = list(zip(picked["start_ns"], picked["end_ns"], picked["pid"], strict=True))
    calls = _calls_in(trace, spans, expected.launched_by)
    launcher = "/".join(expected.launched_by)
    try:
        kern = kernels_in_ranges(trace, where, extra=())
    except ExportError:
        kern = None
    if kern is not None and len(kern):
        api = kern.attrs.get("api_names", {})
        by = np.array([api.get(int(i), "").startswith(expected.launched_by) for i in kern["api_id"]])
        kern = kern[by]
    if kern is None or not len(kern):
        if not calls:
            said = f"lost: no {launcher} call inside {where!r} (the CUDA API trace lost it)"
        else:
            said = f"lost: {calls:,} {launcher} call(s) inside {where!r}, no kernel recorded"
        return Seen(what, False, said)
    strings = trace.strings(kern["name_id"].unique())
    names = [strings.get(int(i), "") for i in kern["name_id"]]
    resolved = [n for n in names if n not in UNNAMED]
    if not resolved:
        said = f"{len(names):,} kernel(s) inside {where!r}, none named: nsys wrote [Unknown]"
        return Seen(what, False, said)
    if expected.named and not any(re.search(expected.named, n, re.IGNORECASE) for n in resolved):
        seen = ", ".join(sorted(set(resolved))[:3])
        return Seen(what, False, f"no kernel named like {expected.named} inside {where!r} (found: {seen})")
    api = kern.attrs.get("api_names", {})
    chosen, call = next(
        (n, api.get(int(i), "?"))
        for n, i in zip(names, kern["api_id"], strict=True)
        if n not in UNNAMED and (not expected.named or re.search(expected.named, n, re.IGNORECASE))
    )
    return Seen(what, True, f"{len(kern):,} kernel(s), e.g. {chosen} launched by {call}")


def check_all(trace: Trace, expected: tuple[Expected, ...] = EXPECTED) -> list[Seen]:
    return [check(trace, e) for e in expected]
