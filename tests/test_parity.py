"""Every table against every report `nsys stats` printed for every fixture, cell for cell.

The fixtures span nsys 2020.3 to 2025.5 (schema 2.x to 3.23). Where the oracle double counts (the A100
export records each CUDA runtime call twice), the table's own test pins the difference instead:
test_cuda_api, test_launch, test_nvtx_gpu.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from conftest import NSYS_EXPORTS, SHARED_NSYS, corpus_cases, need
from export_data import as_printed

from analysis import cuda_api, kernels, launch, memops, nvtx, nvtx_gpu, osrt
from analysis.trace import Trace, open_trace

TABLES: dict[str, Callable[[Trace], pd.DataFrame]] = {
    "gpukernsum": kernels.kernel_summary,
    "gpukernsum_base": lambda t: kernels.kernel_summary(t, names="base"),
    "gpukernsum_mangled": lambda t: kernels.kernel_summary(t, names="mangled"),
    "cudaapisum": cuda_api.cuda_api_summary,
    "gpumemtimesum": memops.memops_time,
    "gpumemsizesum": memops.memops_size,
    "kernexecsum": launch.launch_summary,
    "nvtxkernsum": lambda t: nvtx_gpu.nvtx_gpu_kernels(t, mode="thread", by="raw"),
    "nvtxgpuproj": nvtx_gpu.nvtx_gpu_projection,
    "nvtxsum": lambda t: nvtx.nvtx_summary(t, by="raw"),
    "nvtxppsum": lambda t: nvtx.nvtx_pushpop_summary(t, by="raw"),
    "nvtxpptrace": nvtx.nvtx_trace,
    "osrtsum": osrt.osrt_summary,
}
DOUBLE_COUNTED = {("a100-saxpy-mpi", "cudaapisum"), ("a100-saxpy-mpi", "kernexecsum"),
                  ("a100-saxpy-mpi", "nvtxkernsum")}  # fmt: skip
FIXTURES = NSYS_EXPORTS


def cases() -> list[tuple[str, str]]:
    out = []
    for fixture in FIXTURES:
        expected = SHARED_NSYS / fixture / "expected"
        for csv in sorted(expected.glob("*.csv")) if expected.is_dir() else []:
            if (Path(fixture).name, csv.stem) not in DOUBLE_COUNTED:
                out.append((fixture, csv.stem))
    return out


def test_every_fixture_is_there() -> None:
    for fixture in FIXTURES:
        need(SHARED_NSYS / fixture / "report.sqlite")
    assert len(cases()) == 59


@pytest.mark.parametrize(("fixture", "report"), corpus_cases(cases(), 2, SHARED_NSYS))
@pytest.mark.parametrize("cache", [False, True], ids=["source", "cache"])
def test_equals_nsys_stats(fixture: str, report: str, cache: bool) -> None:
    folder = need(SHARED_NSYS / fixture)
    assert report in TABLES, f"no table for the oracle report {report}"
    if cache:  # read once to fill the cache, then again from Parquet alone
        with open_trace(folder / "report.sqlite") as first:  # closing waits for the cache writes
            TABLES[report](first)
        trace = open_trace(folder / "report.sqlite")
        assert trace.source_reads == {}
    else:
        trace = open_trace(folder / "report.sqlite", cache=False)
    ours = as_printed(TABLES[report](trace))
    theirs = pd.read_csv(folder / "expected" / f"{report}.csv")
    pd.testing.assert_frame_equal(ours, theirs, check_dtype=False)
    if cache:
        assert trace.source_reads == {}
