"""The GPU self-test of `harness doctor`: a tiny program that launches a kernel, a cuBLAS matrix product and a
CUDA graph replay, each inside an NVTX range, profiled under the nsys in use with the harness's trace
settings; then each is looked for in the export (analysis.runs.selftest): its kernel, the call that launched
it
and a resolved name. Before it checked NVTX only, which is how an nsys that recorded 0 kernels of a CUDA 13
program on an H100 went unnoticed until a real run.
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
from pathlib import Path

from analysis.errors import AnalysisError
from analysis.runs.selftest import EXPECTED, Seen, check_all
from analysis.trace.opening import open_trace
from harness.core.errors import HarnessError
from harness.execution import nsys
from harness.execution.nsys.find import NsysInfo

ITEM = "GPU self-test"
PROGRAM = textwrap.dedent(
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
TRACE = ("cuda", "nvtx", "osrt")


def gpu_self_test(info: NsysInfo) -> list[tuple[str, str, str]]:
    """(item, status, detail) for each piece of GPU work: ok, or fail with what nsys lost."""
    with tempfile.TemporaryDirectory(prefix="harness-doctor-gpu-") as tmp:
        script = Path(tmp) / "gpu_work.py"
        script.write_text(PROGRAM)
        opts = nsys.ProfileOptions(output=Path(tmp) / "gpu-self-test", trace=TRACE, python_backtrace=None)
        try:
            prof = nsys.profile(info, opts, [sys.executable, str(script)], cleanup=[Path(tmp)])
        except OSError as e:
            return [(ITEM, "fail", f"nsys could not start: {e}")]
        if prof.returncode != 0:
            return [(ITEM, "fail", f"the GPU program exited {prof.returncode}: {prof.program_tail}")]
        if prof.sqlite is None:
            return [(ITEM, "fail", "no SQLite export: " + "; ".join(prof.notes or [prof.stderr_tail]))]
        return judged(prof.sqlite)


def judged(export: Path) -> list[tuple[str, str, str]]:
    """The self-test's checks of an export (analysis.runs.selftest), as doctor rows."""
    try:
        seen: list[Seen] = check_all(open_trace(export, cache=False))
    except (AnalysisError, HarnessError) as e:
        return [(ITEM, "fail", str(e))]
    return [(f"{ITEM}: {s.what}", "ok" if s.ok else "fail", s.detail) for s in seen]
