"""The self-tests of `harness doctor`: a small program profiled under the nsys in use with the harness's
trace settings, exported, and its export read back (analysis).

- The NVTX self-test: a script that emits one range with the harness's emitter; the range is read back.
- The GPU self-test: a program that launches a kernel, a cuBLAS matrix product and a CUDA graph replay, each
  inside an NVTX range; each is looked for in the export (analysis.runs.selftest): its kernel, the call that
  launched it and a resolved name. NVTX alone is not enough: an nsys that records 0 kernels of a CUDA 13
  program (on an H100) still records its ranges.

Each answers in doctor's rows: (item, status, detail).
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from analysis.errors import AnalysisError
from analysis.runs.selftest import EXPECTED, Seen, check_all
from analysis.tables.nvtx import nvtx_ranges
from analysis.tables.stats_format import release
from analysis.trace.opening import open_trace
from harness.core import nvtx_ranges as emitter
from harness.core.errors import HarnessError
from harness.execution import nsys
from harness.execution.nsys.find import NsysInfo

Row = tuple[str, str, str]  # (item, status, detail): a line of `harness doctor`
T = TypeVar("T")

SELF_TEST = "self-test"
SELF_TEST_RANGE = "harness-doctor"
SELF_TEST_PAYLOAD = 7
SELF_TEST_SCRIPT = textwrap.dedent(
    f"""
    from harness.core import nvtx_ranges
    with nvtx_ranges.nvtx_range({SELF_TEST_RANGE!r}, {SELF_TEST_PAYLOAD}):
        sum(range(100000))
    """
)
RECORDED_NOTHING = (
    "nsys ran the script and recorded nothing of it: its export holds no NVTX range and no OS runtime call, "
    "both traced (--trace=nvtx,osrt); an nsys installation that is incomplete does this (the nsys row)"
)

ITEM = "GPU self-test"
GPU_PROGRAM = textwrap.dedent(
    f"""
    import torch
    from harness.core import nvtx_ranges

    x = torch.randn(512, 512, device="cuda")
    static = torch.zeros(512, device="cuda")
    torch.cuda.synchronize()
    with nvtx_ranges.nvtx_range({EXPECTED[0].range!r}, 1):
        y = x * 2.0
        torch.cuda.synchronize()
    with nvtx_ranges.nvtx_range({EXPECTED[1].range!r}, 2):
        z = x @ x
        torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up before capture, as torch.cuda.graph asks
        for _ in range(3):
            out = static * 3 + 1
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = static * 3 + 1
    with nvtx_ranges.nvtx_range({EXPECTED[2].range!r}, 3):
        graph.replay()
        torch.cuda.synchronize()
    """
)
GPU_TRACE = ("cuda", "nvtx", "osrt")


def _profiled(info: NsysInfo, program: str, trace: tuple[str, ...], name: str, what: str,
              read: Callable[[Path], T]) -> T | str:  # fmt: skip
    """`program` (the `what`, in messages) profiled under nsys in a temporary folder, its export given to
    `read`; or why there is no export."""
    with tempfile.TemporaryDirectory(prefix=f"harness-doctor-{name}-") as tmp:
        script = Path(tmp) / f"{name}.py"
        script.write_text(program)
        opts = nsys.ProfileOptions(output=Path(tmp) / name, trace=trace, python_backtrace=None)
        try:
            prof = nsys.profile(info, opts, [sys.executable, str(script)], cleanup=[Path(tmp)])
        except OSError as e:
            return f"nsys could not start: {e}"
        if prof.returncode != 0:
            return f"{what} exited {prof.returncode}: {prof.program_tail}"
        if prof.sqlite is None:
            return "no SQLite export: " + "; ".join(prof.notes or [prof.stderr_tail])
        return read(prof.sqlite)


def nvtx_self_test(info: NsysInfo) -> Row:
    """Profile a script that emits one range with the harness's emitter, export it, read the range back."""
    got = _profiled(info, SELF_TEST_SCRIPT, ("nvtx", "osrt"), "self-test", "profiled script", read_back)
    return (SELF_TEST, "fail", got) if isinstance(got, str) else got


def read_back(export: Path) -> Row:
    """The NVTX self-test's range, read back from its export."""
    try:
        trace = open_trace(export, cache=False)
        if not trace.has("nvtx") and not trace.has("osrt"):
            return (SELF_TEST, "fail", RECORDED_NOTHING)
        ranges = nvtx_ranges(trace, names=[SELF_TEST_RANGE])
    except (AnalysisError, HarnessError) as e:
        return (SELF_TEST, "fail", str(e))
    if ranges.empty:
        return (
            SELF_TEST,
            "fail",
            f"nsys recorded no NVTX range from the emitter ({emitter.EMITTER}); with nsys 2022.4 use "
            "the python nvtx package 0.2.11 (pip install nvtx==0.2.11)",
        )
    payload = ranges["payload"].iloc[0]
    return (
        SELF_TEST,
        "ok",
        f"profiled, exported and read back range {SELF_TEST_RANGE!r} (payload {payload}, "
        f"{int(ranges['duration_ns'].iloc[0]):,} ns)",
    )


def nvtx_records_nothing(nsys_version: str, nvtx_version: tuple[int, ...]) -> bool:
    """Whether the python nvtx package of this version records nothing under that nsys: measured, 0.2.12+
    under nsys 2022.4 and 2023.4 (docs/nsys.md); newer nsys untried."""
    return (release(nsys_version) or (0, 0)) <= (2023, 4) and nvtx_version >= (0, 2, 12)


def gpu_self_test(info: NsysInfo) -> list[Row]:
    """A row for each piece of GPU work: ok, or fail with what nsys lost."""
    got = _profiled(info, GPU_PROGRAM, GPU_TRACE, "gpu-self-test", "the GPU program", judged)
    return [(ITEM, "fail", got)] if isinstance(got, str) else got


def judged(export: Path) -> list[Row]:
    """The self-test's checks of an export (analysis.runs.selftest), as doctor rows."""
    try:
        seen: list[Seen] = check_all(open_trace(export, cache=False))
    except (AnalysisError, HarnessError) as e:
        return [(ITEM, "fail", str(e))]
    return [(f"{ITEM}: {s.what}", "ok" if s.ok else "fail", s.detail) for s in seen]
