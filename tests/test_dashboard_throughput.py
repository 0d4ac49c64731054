"""Panel 5: tokens/s, TFLOP/s and MFU per configuration."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.dashboard.panel import DashboardData
from analysis.dashboard.throughput import throughput_figure, throughput_panel, throughput_table

RUNS = pd.DataFrame(
    {
        "run_id": ["a", "b", "c", "d", "e"],
        "model": ["tiny", "small", "tiny", "small", "tiny"],
        "precision": ["fp32", "fp32", "bf16", "bf16", "fp32"],
        "compile": [False, False, False, False, False],
        "device": "cuda",
        "status": ["ok", "ok", "ok", "oom", "ok"],
        "profiler": "none",
        "params": [1, 8, 1, 8, 1],
        "tokens_per_s": [1000.0, 250.0, 1800.0, None, 1100.0],
        "achieved_flops": [2e12, 3e12, 4e12, None, 2.5e12],
        "mfu": [0.01, 0.015, 0.02, None, 0.0125],
    }
)


def test_table_keeps_newest_ok_run_per_config() -> None:
    table = throughput_table(RUNS)
    assert list(table["run_id"]) == ["b", "c", "e"]  # e replaces a (same config, newer); d is OOM


def test_figure_has_one_subplot_per_metric_in_display_units() -> None:
    fig = throughput_figure(throughput_table(RUNS), ["tiny", "small"])
    assert [a.text for a in fig.layout.annotations] == ["tokens/s", "achieved TFLOP/s", "MFU (%)"]
    fp32_mfu = next(t for t in fig.data if t.name == "fp32" and t.xaxis == "x3")
    assert dict(zip(fp32_mfu.x, fp32_mfu.y, strict=True)) == pytest.approx({"small": 1.5, "tiny": 1.25})
    bf16_tflops = next(t for t in fig.data if t.name == "bf16" and t.xaxis == "x2")
    assert list(bf16_tflops.y) == pytest.approx([4.0])
    assert fp32_mfu.marker.color != bf16_tflops.marker.color
    assert sum(t.showlegend for t in fig.data) == 2  # one legend entry per setting


def test_cpu_runs_without_flops_show_tokens_only_and_say_why() -> None:
    cpu = RUNS.assign(achieved_flops=None, mfu=None)
    panel = throughput_panel(DashboardData(runs=cpu))
    assert [a.text for a in panel.figure.layout.annotations] == ["tokens/s"]
    assert "peak FLOP/s" in panel.notes[0]


def test_missing_without_successful_runs() -> None:
    panel = throughput_panel(DashboardData(runs=RUNS.assign(status="oom")))
    assert panel.figure is None and "harness run tiny" in panel.missing
