"""Every table against every report `nsys stats` printed for every fixture, cell for cell, in the format of
each nsys that printed them: 2022.4.2.1 (`expected/` beside each shared export) and 2023.4.4
(tests/oracles/nsys-2023.4/, and h100-medium's `expected-2023.4/`). The format is pinned per oracle
(analysis.tables.stats_format), never taken from the nsys installed here. The project's own captures
(tests/data/h100/) are held against 2023.4's oracles of them (tests/oracles/nsys-2023.4/h100/): CUDA 13
programs on an H100, CUDA-graph replays traced per node among them.

The fixtures span nsys 2020.3 to 2026.2 (schema 2.x to 3.25). Where the oracle double counts (the A100
export records each CUDA runtime call twice), the table's own test pins the difference instead:
test_cuda_api, test_launch, test_nvtx_gpu.
"""

from __future__ import annotations

import lzma
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from conftest import NSYS_EXPORTS, ORACLES, REPO, SHARED_NSYS, corpus_cases, need
from export_data import as_printed

from analysis.tables import api, kernels, launch, memops, nvtx, nvtx_gpu, osrt
from analysis.trace.opening import open_trace
from analysis.trace.trace import Trace

Table = Callable[[Trace, str], pd.DataFrame]  # (trace, stats format) -> the table
KERNELS: dict[str, Table] = {
    "gpukernsum": lambda t, f: kernels.kernel_summary(t, stats_format=f),
    "gpukernsum_base": lambda t, f: kernels.kernel_summary(t, names="base", stats_format=f),
    "gpukernsum_mangled": lambda t, f: kernels.kernel_summary(t, names="mangled", stats_format=f),
}
TABLES: dict[str, Table] = {
    **KERNELS,
    "cudaapisum": lambda t, f: api.cuda_api_summary(t),
    "gpumemtimesum": lambda t, f: memops.memops_time(t, f),
    "gpumemsizesum": lambda t, f: memops.memops_size(t, f),
    "kernexecsum": lambda t, f: launch.launch_summary(t),
    "nvtxkernsum": lambda t, f: nvtx_gpu.nvtx_gpu_kernels(t, mode="thread", by="raw"),
    "nvtxgpuproj": lambda t, f: nvtx_gpu.nvtx_gpu_projection(t)[nvtx_gpu.PROJECTION_COLUMNS],
    "nvtxsum": lambda t, f: nvtx.nvtx_summary(t, by="raw"),
    "nvtxppsum": lambda t, f: nvtx.nvtx_pushpop_summary(t, by="raw"),
    "nvtxpptrace": lambda t, f: nvtx.nvtx_trace(t),
    "osrtsum": lambda t, f: osrt.osrt_summary(t),
}
# the names nsys 2023 gives the same reports (`nsys stats --help-reports`); cuda_gpu_kern_gb_sum holds the
# rows per launch shape that gpukernsum had
RENAMED = {
    "cuda_gpu_kern_sum": "gpukernsum", "cuda_gpu_kern_sum_base": "gpukernsum_base",
    "cuda_gpu_kern_sum_mangled": "gpukernsum_mangled", "cuda_api_sum": "cudaapisum",
    "cuda_gpu_mem_time_sum": "gpumemtimesum", "cuda_gpu_mem_size_sum": "gpumemsizesum",
    "cuda_kern_exec_sum": "kernexecsum", "nvtx_kern_sum": "nvtxkernsum", "nvtx_gpu_proj_trace": "nvtxgpuproj",
    "nvtx_sum": "nvtxsum", "nvtx_pushpop_sum": "nvtxppsum", "nvtx_pushpop_trace": "nvtxpptrace",
    "osrt_sum": "osrtsum",
}  # fmt: skip
TABLES["cuda_gpu_kern_gb_sum"] = lambda t, f: kernels.kernel_summary(t, by="shape", stats_format=f)
NOT_MIRRORED = {"nvtx_gpu_proj_sum"}  # 2023's summary of the projection: no table of ours mirrors it
DOUBLE_COUNTED = {"cudaapisum", "kernexecsum", "nvtxkernsum"}  # in a100-saxpy-mpi only
FIXTURES = [*NSYS_EXPORTS, "h100-medium"]
V2022, V2023 = "2022.4", "2023.4"


def oracle_folders(fixture: str) -> list[tuple[str, Path]]:
    """(format, folder of CSVs) of every oracle of the fixture."""
    return [
        (V2022, SHARED_NSYS / fixture / "expected"),
        (V2023, SHARED_NSYS / fixture / "expected-2023.4"),  # h100-medium's, by the old report names
        (V2023, ORACLES / "nsys-2023.4" / fixture),
    ]


def cases() -> list[tuple[str, str, Path]]:
    """(fixture, format, oracle CSV) of every oracle CSV there is."""
    out = []
    for fixture in FIXTURES:
        for version, folder in oracle_folders(fixture):
            for csv in sorted(folder.glob("*.csv*")) if folder.is_dir() else []:
                name = table_of(csv)
                if csv.name.split(".")[0] in NOT_MIRRORED:
                    continue
                if fixture == "a100-saxpy-mpi" and name in DOUBLE_COUNTED:
                    continue
                out.append((fixture, version, csv))
    return out


def table_of(csv: Path) -> str:
    """The key in TABLES of the report an oracle CSV holds."""
    report = csv.name.split(".")[0]
    return report if report in TABLES else RENAMED.get(report, report)


def read_oracle(csv: Path) -> pd.DataFrame:
    theirs = pd.read_csv(csv)
    if csv.name.startswith("nvtx_gpu_proj_trace"):
        # the GPU operations outside any range: one row, with the PID/TID of whichever the grouping met
        theirs = theirs[theirs["RangeId"].notna()].reset_index(drop=True)
    if csv.parent.name == "expected-2023.4" and csv.name == "nvtxpptrace.csv":
        # 2023.4 keeps nvtxpptrace as a deprecated report without an ORDER BY: the rows come in the order
        # of its recursive query (level by level); its nvtx_pushpop_trace orders them by start, as ours
        theirs = theirs.sort_values(["Start (ns)", "Duration (ns)"], kind="stable").reset_index(drop=True)
    return theirs


def test_every_fixture_is_there() -> None:
    for fixture in FIXTURES:
        need(SHARED_NSYS / fixture / "report.sqlite")
    found = cases()
    assert sum(v == V2022 for _, v, _ in found) == 70  # 59 of the corpus, 11 of h100-medium
    assert sum(v == V2023 for _, v, _ in found) == 97  # 86 made here, 11 of h100-medium's expected-2023.4
    # every report each nsys printed for an export has a table here (or is named in NOT_MIRRORED)
    assert all(table_of(csv) in TABLES for _, _, csv in found)


def idents() -> list[str]:
    return [f"{f}-{v}-{csv.parent.name}-{csv.name.split('.')[0]}" for f, v, csv in cases()] or ["no-corpus"]


@pytest.mark.parametrize(("fixture", "version", "csv"), corpus_cases(cases(), 3, SHARED_NSYS), ids=idents())
@pytest.mark.parametrize("cache", [False, True], ids=["source", "cache"])
def test_equals_nsys_stats(fixture: str, version: str, csv: Path, cache: bool) -> None:
    folder = need(SHARED_NSYS / fixture)
    build = TABLES[table_of(csv)]
    if cache:  # read once to fill the cache, then again from Parquet alone
        with open_trace(folder / "report.sqlite") as first:  # closing waits for the cache writes
            build(first, version)
        trace = open_trace(folder / "report.sqlite")
        assert trace.source_reads == {}
    else:
        trace = open_trace(folder / "report.sqlite", cache=False)
    ours = as_printed(build(trace, version))
    pd.testing.assert_frame_equal(ours, read_oracle(csv), check_dtype=False)
    if cache:
        assert trace.source_reads == {}


CAPTURES = REPO / "tests" / "data" / "h100"
CAPTURE_ORACLES = ORACLES / "nsys-2023.4" / "h100"


def capture_cases() -> list[tuple[str, Path]]:
    """(capture, oracle CSV) of every oracle of the project's own captures."""
    return [
        (folder.name, csv)
        for folder in sorted(CAPTURE_ORACLES.iterdir())
        for csv in sorted(folder.glob("*.csv*"))
        if csv.name.split(".")[0] not in NOT_MIRRORED
    ]


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/data/h100's captures decompressed, read-only, each as NAME.sqlite."""
    folder = tmp_path_factory.mktemp("captures")
    for packed in CAPTURES.glob("*.sqlite.xz"):
        path = folder / packed.name.removesuffix(".xz")
        with lzma.open(packed) as src, path.open("wb") as out:
            shutil.copyfileobj(src, out)
        path.chmod(0o444)
    return folder


def test_every_capture_has_its_oracles() -> None:
    names = {p.name.removesuffix(".sqlite.xz") for p in CAPTURES.glob("*.sqlite.xz")}
    assert {f.name for f in CAPTURE_ORACLES.iterdir()} == names
    assert len(capture_cases()) == 72


@pytest.mark.parametrize(
    ("capture", "csv"), capture_cases(), ids=[f"{c}-{csv.name.split('.')[0]}" for c, csv in capture_cases()]
)
def test_the_projects_captures_equal_nsys_stats(captures: Path, capture: str, csv: Path) -> None:
    trace = open_trace(captures / f"{capture}.sqlite", cache=False)
    ours = as_printed(TABLES[table_of(csv)](trace, V2023))
    pd.testing.assert_frame_equal(ours, read_oracle(csv), check_dtype=False)
