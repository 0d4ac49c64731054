"""The attention panel: the newest sweep from the store, one heatmap per implementation, OOM cells marked."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.dashboard import collect
from analysis.dashboard.attention import attention_figure, attention_grid, attention_panel, newest_sweep
from analysis.dashboard.panel import DashboardData
from harness.cli import app
from harness.experiments.attention import AttentionCell, AttentionConfig, AttentionSweep
from harness.store.results import ResultsStore

MS = 1_000_000


def sweep(sweep_id: str, cells: list[AttentionCell]) -> AttentionSweep:
    config = AttentionConfig(batch_size=8, head_dims=(16, 32), seq_lens=(256, 1024), impls=("math", "sdpa"))
    return AttentionSweep(sweep_id, config, "cuda", "NVIDIA H100", "torch.cuda.max_memory_allocated")


def cell(impl: str, head_dim: int, seq_len: int, fwd_ms: float, bwd_ms: float) -> AttentionCell:
    return AttentionCell(
        impl, head_dim, seq_len, "ok", fwd_ms * MS, 0.01 * MS, bwd_ms * MS, 0.02 * MS, int(seq_len * 2**20)
    )


NEWEST = [
    cell("math", 16, 256, 0.13, 0.71),
    cell("math", 16, 1024, 0.14, 0.32),
    cell("math", 32, 256, 0.34, 0.63),
    AttentionCell("math", 32, 1024, "oom", error="CUDA out of memory"),
    cell("sdpa", 16, 256, 0.05, 0.10),
    cell("sdpa", 16, 1024, 0.2, 0.3),
    cell("sdpa", 32, 256, 0.06, 0.12),
    cell("sdpa", 32, 1024, 1.0, 9.0),
]


@pytest.fixture
def store(tmp_path: Path) -> ResultsStore:
    store = ResultsStore(str(tmp_path / "results.sqlite"))
    old = sweep("attn-old", [])
    store.save_attention(old, cell("math", 16, 256, 5.0, 5.0))
    new = sweep("attn-new", NEWEST)
    for c in NEWEST:
        store.save_attention(new, c)
    return store


def test_collect_takes_the_newest_sweep_only(store: ResultsStore) -> None:
    data = collect(store)
    assert set(data.attention["sweep_id"]) == {"attn-new"} and len(data.attention) == 8
    assert len(newest_sweep(store.attention_results())) == 8


def test_grid_sums_forward_and_backward_in_ms(store: ResultsStore) -> None:
    grid = attention_grid(newest_sweep(store.attention_results()))
    first = grid.iloc[0]
    assert first["total_ms"] == pytest.approx(0.84) and first["peak_mib"] == 256
    assert math.isnan(grid.iloc[3]["total_ms"])  # the OOM cell has no time


def test_one_heatmap_per_impl_on_one_log_scale_with_oom_marked(store: ResultsStore) -> None:
    fig = attention_figure(attention_grid(newest_sweep(store.attention_results())))
    heatmaps = [t for t in fig.data if t.type == "heatmap"]
    assert [a.text for a in fig.layout.annotations] == ["math", "sdpa"]
    assert len(heatmaps) == 2 and all(h.coloraxis == "coloraxis" for h in heatmaps)
    math_map, sdpa_map = heatmaps
    assert list(math_map.x) == ["256", "1024"] and list(math_map.y) == ["16", "32"]
    assert math_map.z[0][0] == pytest.approx(math.log10(0.84))  # head_dim 16, seq_len 256
    assert math_map.z[1][1] is None and math_map.text[1][1] == "OOM"
    assert sdpa_map.z[1][1] == pytest.approx(1.0)  # 10 ms
    assert fig.layout.coloraxis.cmin == pytest.approx(math.log10(0.15))
    assert fig.layout.coloraxis.cmax == pytest.approx(1.0)
    (oom,) = [t for t in fig.data if t.type == "scatter"]
    assert (list(oom.x), list(oom.y), list(oom.text)) == (["1024"], ["32"], ["OOM"])


def test_panel_title_and_notes_name_the_sweep(store: ResultsStore) -> None:
    panel = attention_panel(collect(store))
    assert panel.figure is not None
    assert "attn-new" in panel.title and "NVIDIA H100" in panel.title
    assert "(batch 8, 1 head, fp32, NVIDIA H100)" in panel.title
    assert panel.notes[0].startswith("1 of 8 cells did not finish")
    assert "max_memory_allocated" in panel.notes[1]


def test_missing_without_attention_results() -> None:
    panel = attention_panel(DashboardData())
    assert panel.figure is None and "harness attention" in panel.missing


def test_the_panel_names_the_other_stored_sweeps(store: ResultsStore) -> None:
    panel = attention_panel(collect(store))
    assert panel.notes[-1] == (
        "the newest of 2 stored sweeps; `harness dashboard --sweep ID` draws another (attn-old)"
    )
    older = attention_panel(collect(store, sweep="attn-o"))  # a unique start of its id
    assert "attn-old" in older.title and older.notes[-1].startswith("one of 2 stored sweeps;")
    assert "(attn-new)" in older.notes[-1]


def test_dashboard_sweep_draws_an_older_sweep(store: ResultsStore, tmp_path: Path) -> None:
    out = tmp_path / "dash.html"
    args = ["dashboard", "--db", str(store.file), "--out", str(out), "--format", "json"]
    result = CliRunner().invoke(app, [*args, "--sweep", "attn-old"])
    assert result.exit_code == 0, result.output
    assert "Attention attn-old:" in out.read_text()
    for sweep, message in [
        (
            "attn-nope",
            "no attention sweep 'attn-nope': the results database holds 2 sweeps, the newest attn-new",
        ),
        ("attn-", "'attn-' is the start of 2 sweeps' ids (attn-new, attn-old): give more of one"),
        (" ", "--sweep names no sweep (' '): give an attention sweep's id"),
    ]:
        refused = CliRunner().invoke(app, [*args, "--sweep", sweep])
        assert refused.exit_code == 2 and refused.stderr.strip() == f"error: {message}", refused.output
