"""`summary`: every table the export has data for, the others skipped with their reason."""

from __future__ import annotations

from pathlib import Path

from export_data import newer_schema

from analysis.tables.summary import summary
from analysis.trace.opening import open_trace


def test_a100(a100_export: Path) -> None:
    report = summary(open_trace(a100_export))
    assert [t for t, _ in report.tables] == [
        "CUDA kernels (gpukernsum)",
        "NVTX ranges (nvtxsum)",
        "GPU time per NVTX range (nvtxkernsum)",
        "CUDA API (cudaapisum)",
        "GPU memory time (gpumemtimesum)",
        "GPU memory size (gpumemsizesum)",
        "Launch latency (kernexecsum)",
    ]
    assert set(report.skipped) == {"Do the phases add up?", "OS runtime (osrtsum)"}
    assert len(report.notes) == 1 and "recorded twice" in report.notes[0]


def test_cpu(cpu_export: Path) -> None:
    report = summary(open_trace(cpu_export))
    assert [t for t, _ in report.tables] == ["NVTX ranges (nvtxsum)", "OS runtime (osrtsum)"]
    assert "no CUDA kernel data" in report.skipped["CUDA kernels (gpukernsum)"]


def test_newer_schema_exports(a100_export: Path, cpu_export: Path, tmp_path: Path) -> None:
    for name, src, count in (("a", a100_export, 7), ("c", cpu_export, 2)):
        report = summary(open_trace(newer_schema(src, tmp_path / f"{name}.sqlite")))
        assert len(report.tables) == count
        kernels = dict(report.tables).get("CUDA kernels (gpukernsum)")
        if kernels is not None:
            assert kernels["Total Time (ns)"].tolist() == [88_573_480]


def test_an_export_without_harness_phases_says_so(a100_export: Path) -> None:
    report = summary(open_trace(a100_export))
    assert report.skipped["Do the phases add up?"] == (
        "the export has no harness phase ranges (`step` ranges and the phases inside them): the tables cover "
        "the whole capture"
    )
