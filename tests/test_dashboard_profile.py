"""Panel 4: top kernels, time per NVTX range, and the one-step timeline, from tables of known content."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis.dashboard.panel import DashboardData, Profile
from analysis.dashboard.profile import (
    MAX_TIMELINE_KERNELS,
    kernels_figure,
    kernels_panel,
    nvtx_gpu_panel,
    range_totals,
    ranges_figure,
    timeline_figure,
    timeline_panel,
    timeline_rows,
)
from analysis.dashboard.style import KERNEL_COLOR, PHASE_COLORS


@pytest.fixture
def gpukernsum(a100_expected: Path) -> pd.DataFrame:
    """The `nsys stats` gpukernsum oracle: the shape analysis.tables.kernels.kernel_summary returns."""
    return pd.read_csv(a100_expected / "gpukernsum.csv")


@pytest.fixture
def nvtxsum(cpu_expected: Path) -> pd.DataFrame:
    return pd.read_csv(cpu_expected / "nvtxsum.csv")


def test_kernels_figure_holds_totals_and_full_names(gpukernsum: pd.DataFrame) -> None:
    fig = kernels_figure(gpukernsum)
    (bar,) = fig.data
    assert list(bar.x) == pytest.approx([88.57348])  # ms
    assert bar.customdata[0, 0] == 88_573_480 and bar.customdata[0, 1] == 5
    assert bar.customdata[0, 5] == "saxpy(double *, double *, double *, double, int)"
    assert bar.marker.color == KERNEL_COLOR
    assert fig.layout.xaxis.title.text == "total GPU time (ms)"


def test_kernels_figure_keeps_top_n_largest_on_top() -> None:
    kernels = pd.DataFrame(
        {"Name": [f"k{i}" for i in range(30)], "Total Time (ns)": range(30), "Instances": 1}
    )
    (bar,) = kernels_figure(kernels, n=5).data
    assert [y.split(". ", 1)[1] for y in bar.y] == ["k25", "k26", "k27", "k28", "k29"]  # bottom to top
    assert bar.y[-1].startswith("1. ")


def test_kernels_panel_without_kernels_says_why() -> None:
    prof = Profile(
        label="cpu-run", path="x.sqlite", kernels=pd.DataFrame(columns=["Name", "Total Time (ns)"])
    )
    panel = kernels_panel(DashboardData(profile=prof))
    assert panel.figure is None and "no GPU kernels in cpu-run" in panel.missing
    missing = kernels_panel(
        DashboardData(profile=Profile("r", "x", missing={"kernels": "needs the kernel table"}))
    )
    assert missing.missing == "needs the kernel table"
    assert "harness run tiny --nsys" in kernels_panel(DashboardData()).missing


def test_profile_without_gpu_shows_its_os_runtime_calls(cpu_export: Path) -> None:
    from analysis.dashboard.load import load_profile

    prof = load_profile(cpu_export, label="cpu-train")
    assert prof.kernels is None and "no CUDA kernel data" in prof.missing["kernels"]
    assert prof.osrt is not None
    panel = kernels_panel(DashboardData(profile=prof))
    assert panel.title == "Top OS runtime calls by total time: cpu-train (no GPU kernels)"
    assert "no CUDA kernel data" in panel.notes[0] and panel.notes[0].endswith("of this profile.")
    (bar,) = panel.figure.data
    top = bar.customdata[-1]  # largest on top
    assert top[5] == "futex" and top[0] == 4_583_777_240 and top[1] == 4  # the osrtsum oracle's first row
    assert panel.figure.layout.xaxis.title.text == "total time in the call (ms)"


def test_gpu_profile_reads_no_os_runtime_table(a100_export: Path) -> None:
    from analysis.dashboard.load import load_profile

    prof = load_profile(a100_export)
    assert prof.kernels is not None and len(prof.kernels) == 1 and prof.osrt is None


def test_ranges_figure_puts_enclosing_ranges_apart(nvtxsum: pd.DataFrame) -> None:
    fig = ranges_figure(nvtxsum, "total CPU time")
    phases, enclosing = fig.data
    assert list(phases.x) == ["forward", "backward", "optimizer"]
    assert list(phases.customdata[:, 0]) == [155012301, 85643923, 49793985]
    assert list(phases.marker.color) == [PHASE_COLORS[p] for p in ("forward", "backward", "optimizer")]
    # `step` holds the three phases: its own subplot, not a fourth bar beside them
    assert list(enclosing.x) == ["step"] and list(enclosing.customdata[:, 0]) == [291431393]
    assert (phases.xaxis, enclosing.xaxis) == ("x", "x2")
    assert [a.text for a in fig.layout.annotations] == [
        "phases and ranges inside them",
        "enclosing ranges (contain the others)",
    ]
    assert list(range_totals(nvtxsum)["enclosing"]) == [True, False, False, False]


def test_ranges_figure_sums_per_range_kernel_rows() -> None:
    table = pd.DataFrame(
        {
            "NVTX Range": [":forward", ":forward", ":backward"],
            "NVTX Inst": [4, 4, 4],
            "Total Time (ns)": [10, 20, 5],
        }
    )
    (bar,) = ranges_figure(table, "total GPU time").data
    assert list(bar.x) == [":forward", ":backward"]
    assert list(bar.customdata[:, 0]) == [30, 5] and list(bar.customdata[:, 1]) == [4, 4]
    assert bar.marker.color[0] == PHASE_COLORS["forward"]


def test_nvtx_panel_falls_back_to_cpu_ranges(nvtxsum: pd.DataFrame) -> None:
    prof = Profile(label="cpu-train", path="r.sqlite", nvtx=nvtxsum, missing={"nvtx_gpu": "no kernels"})
    panel = nvtx_gpu_panel(DashboardData(profile=prof))
    assert panel.title.startswith("CPU time per NVTX range")
    assert panel.figure.data[0].y[0] == pytest.approx(155.012301)  # forward; `step` is in the second subplot
    assert "no kernels" in panel.notes[0]


EVENTS = pd.DataFrame(
    {
        "kind": ["nvtx", "nvtx", "nvtx", "nvtx", "kernel", "kernel", "memcpy"],
        "name": ["step", "forward", "backward", "attn.qkv", "gemm", "softmax", "memcpy HtoD"],
        "start_ns": [1_000, 1_100, 5_000, 1_200, 1_300, 2_000, 900],
        "end_ns": [9_000, 4_900, 8_000, 1_800, 1_900, 2_500, 950],
        "lane": [
            "CPU thread 7",
            "CPU thread 7",
            "CPU thread 7",
            "CPU thread 7",
            "stream 7",
            "stream 7",
            "stream 7",
        ],
    }
)


def test_timeline_rows_nest_ranges_and_start_at_zero() -> None:
    ev, dropped = timeline_rows(EVENTS)
    assert dropped == 0
    by_name = ev.set_index("name")
    assert by_name.loc["memcpy HtoD", "rel_start_ns"] == 0
    assert by_name.loc["step", "rel_start_ns"] == 100
    assert list(by_name.loc[["step", "forward", "backward", "attn.qkv"], "depth"]) == [0, 1, 1, 2]
    assert by_name.loc["step", "row"] == "CPU thread 7: step"
    assert by_name.loc["backward", "row"] == "CPU thread 7: forward, backward"
    assert by_name.loc["attn.qkv", "row"] == "CPU thread 7: attn.qkv"
    assert by_name.loc["gemm", "row"] == "GPU stream 7"
    assert by_name.loc["gemm", "duration_ns"] == 600


def test_timeline_figure_bars_span_start_to_end() -> None:
    ev, _ = timeline_rows(EVENTS)
    fig = timeline_figure(ev)
    names = [t.name for t in fig.data]
    assert names == ["forward", "backward", "step", "other NVTX range", "kernel", "memcpy / memset"]
    kernel = fig.data[names.index("kernel")]
    assert list(kernel.base) == pytest.approx([0.0004, 0.0011])  # ms from the first event
    assert list(kernel.x) == pytest.approx([0.0006, 0.0005])
    assert list(kernel.customdata[:, 1]) == [600, 500]
    forward = fig.data[names.index("forward")]
    assert forward.marker.color == PHASE_COLORS["forward"]
    assert list(forward.y) == ["CPU thread 7: forward, backward"]
    assert list(fig.layout.yaxis.categoryarray) == [
        "CPU thread 7: step",
        "CPU thread 7: forward, backward",
        "CPU thread 7: attn.qkv",
        "GPU stream 7",
    ]


def test_timeline_rows_keep_same_names_at_two_depths_apart() -> None:
    nested = pd.DataFrame(
        {
            "kind": "nvtx",
            "name": ["block", "block"],
            "start_ns": [0, 10],
            "end_ns": [100, 90],
            "lane": "python (main thread)",
        }
    )
    ev, _ = timeline_rows(nested)
    lane = "python (main thread)"
    assert list(ev["row"]) == [f"{lane}: block (level 0)", f"{lane}: block (level 1)"]


def test_timeline_caps_kernels_keeping_the_longest() -> None:
    n = MAX_TIMELINE_KERNELS + 500
    many = pd.DataFrame(
        {"kind": "kernel", "name": "k", "start_ns": range(0, 10 * n, 10), "lane": "stream 1"}
    ).assign(end_ns=lambda d: d["start_ns"] + 1 + d.index % 7)
    panel = timeline_panel(DashboardData(profile=Profile("big", "b.sqlite", events=many)))
    (bar,) = panel.figure.data
    assert len(bar.x) == MAX_TIMELINE_KERNELS
    shortest = int((many.index % 7 == 0).sum())  # 1 ns kernels: the 500 dropped are among them
    assert list(bar.customdata[:, 1]).count(1) == shortest - 500
    assert any(f"{n:,} kernels" in note for note in panel.notes)


def test_detail_ranges_add_attention_vs_mlp() -> None:
    table = pd.DataFrame(
        {
            "Range": [":forward", ":qkv_proj", ":attn_scores", ":mlp_up", ":mlp_down", ":layer_0"],
            "Instances": [2, 4, 4, 4, 4, 4],
            "Total Time (ns)": [1000, 200, 100, 300, 150, 800],
        }
    )
    prof = Profile(label="detail", path="d.sqlite", nvtx_gpu=table)
    fig = nvtx_gpu_panel(DashboardData(profile=prof)).figure
    ranges, groups = fig.data
    assert ranges.x[0] == ":forward" and len(ranges.x) == 6
    assert list(groups.x) == ["attention", "MLP"]
    assert list(groups.customdata[:, 0]) == [300, 450]
    assert groups.customdata[0, 1] == ":attn_scores, :qkv_proj"
    plain = nvtx_gpu_panel(DashboardData(profile=Profile("p", "p", nvtx_gpu=table.iloc[:1]))).figure
    assert len(plain.data) == 1  # no detail ranges, no second subplot


def test_empty_nvtx_panel_gives_the_lack_of_ranges_as_its_cause() -> None:
    """An export with neither NVTX ranges nor kernels (weatherbench2) lacks the panel because
    it has no NVTX ranges; the missing kernels are not the cause."""
    from analysis.dashboard.profile import nvtx_gpu_panel

    p = Profile(label="r.sqlite", path="r.sqlite")
    p.missing = {
        "nvtx_gpu": "no CUDA kernel data in r.sqlite: profile on a GPU with --trace=cuda",
        "nvtx": "no NVTX data in r.sqlite: profile with --trace=nvtx and a program that emits NVTX ranges",
    }
    assert nvtx_gpu_panel(DashboardData(profile=p)).missing == p.missing["nvtx"]
    p.missing, p.nvtx = {"nvtx_gpu": p.missing["nvtx_gpu"]}, pd.DataFrame()
    assert nvtx_gpu_panel(DashboardData(profile=p)).missing == "no NVTX ranges in r.sqlite"


def test_html_in_an_exports_names_is_shown_as_written(a100_export: Path, tmp_path: Path) -> None:
    """plotly reads <b>, <br>, <a href> and entities in labels and hovers: names from an export are text."""
    import shutil
    import sqlite3

    from analysis.dashboard import collect_export
    from analysis.dashboard.page import build_panels
    from analysis.dashboard.registry import PANELS

    export = tmp_path / "html names.sqlite"
    shutil.copyfile(a100_export, export)
    kernel, nvtx = "saxpy<b>x</b> & y<br>z", "<i>saxpy</i>"
    with sqlite3.connect(export) as db:
        db.execute("UPDATE StringIds SET value = ? WHERE id = 670", (kernel,))
        db.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text = 'saxpy'", (nvtx,))
    db.close()
    panels = {p.key: p for p in build_panels(collect_export(export, cache=False), "profile", PANELS)}
    shown_kernel, shown_nvtx = "saxpy&lt;b&gt;x&lt;/b&gt; &amp; y&lt;br&gt;z", "&lt;i&gt;saxpy&lt;/i&gt;"
    (bar,) = panels["kernels"].figure.data
    assert list(bar.y) == [f"1. {shown_kernel}"] and bar.customdata[0, 5] == shown_kernel
    ranges = [x for trace in panels["nvtx"].figure.data for x in trace.x]
    assert shown_nvtx in ranges and nvtx not in ranges
    timeline = panels["timeline"].figure
    names = {n for trace in timeline.data for n in trace.customdata[:, 0]}
    assert {shown_kernel, shown_nvtx} <= names and not {kernel, nvtx} & names
    rows = list(timeline.layout.yaxis.categoryarray)
    assert any(shown_nvtx in r for r in rows) and not any(nvtx in r for r in rows)


def test_html_in_a_diffs_names_is_shown_as_written() -> None:
    from analysis.dashboard.diff import diff_figure

    table = pd.DataFrame({"Name": ["k<sub>2</sub>"], "Change": ["changed"], "Δ Total Time (ns)": [1e6],
                          "Instances A": [1], "Instances B": [1], "Δ Total Time (%)": [10.0]})  # fmt: skip
    assert list(diff_figure(table).data[0].y) == ["k&lt;sub&gt;2&lt;/sub&gt;"]
