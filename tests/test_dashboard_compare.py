"""Panel 6: two runs compared per phase and per kernel."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis.dashboard.compare import compare_panel, kernel_diff, phase_diff, pick_pair
from analysis.dashboard.panel import DashboardData
from analysis.dashboard.style import PHASE_COLORS
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

RUNS = pd.DataFrame(
    {
        "run_id": ["tiny-1", "small-1", "tiny-2", "tiny-bf16", "small-oom"],
        "model": ["tiny", "small", "tiny", "tiny", "small"],
        "mode": "train",
        "device": "cpu",
        "precision": ["fp32", "fp32", "fp32", "bf16", "fp32"],
        "compile": False,
        "status": ["ok", "ok", "ok", "ok", "oom"],
        "forward_mean_ns": [1_000_000.0, 3e6, 1_100_000.0, 900_000.0, None],
        "backward_mean_ns": [2_000_000.0, 6e6, 1_900_000.0, 1_800_000.0, None],
        "optimizer_mean_ns": [500_000.0, 1e6, 500_000.0, 400_000.0, None],
    }
)


def test_default_pair_is_newest_ok_run_and_its_closest_earlier_match() -> None:
    assert pick_pair(RUNS) == ("tiny-2", "tiny-bf16")  # newest earlier tiny; no earlier tiny bf16
    assert pick_pair(RUNS.iloc[:3]) == ("tiny-1", "tiny-2")  # same model and setting
    assert pick_pair(RUNS.iloc[:1]) is None


def test_a_program_run_is_not_picked_to_compare() -> None:
    """`profile -- CMD` stores a run of mode `program`: the harness timed no phase of it. The newest such run
    was paired with the newest training run, and the panel said only that they had no phase in common."""
    program = pd.DataFrame(
        {"run_id": ["python-1"], "model": "python", "mode": "program", "device": "n/a", "precision": "n/a",
         "compile": False, "status": "ok"}
    )  # fmt: skip
    runs = pd.concat([RUNS, program], ignore_index=True)
    assert pick_pair(runs) == ("tiny-2", "tiny-bf16")
    panel = compare_panel(DashboardData(runs=runs))
    assert panel.figure is not None, panel.missing


def test_phase_diff_values() -> None:
    d = phase_diff(RUNS, "tiny-1", "tiny-2").set_index("phase")
    assert d.loc["forward", "diff_ns"] == 100_000
    assert d.loc["forward", "diff_pct"] == pytest.approx(10.0)
    assert d.loc["backward", "diff_pct"] == pytest.approx(-5.0)


def test_kernel_diff_ranks_by_absolute_difference() -> None:
    a = pd.DataFrame({"Name": ["gemm", "softmax", "gone"], "Total Time (ns)": [100, 50, 30]})
    b = pd.DataFrame({"Name": ["gemm", "softmax", "new"], "Total Time (ns)": [160, 10, 5]})
    d = kernel_diff(a, b)
    assert list(d["Name"]) == ["gemm", "softmax", "gone", "new"]
    assert list(d["diff_ns"]) == [60, -40, -30, 5]


def test_compare_panel_figure() -> None:
    ka = pd.DataFrame({"Name": ["gemm"], "Total Time (ns)": [1_000_000]})
    kb = pd.DataFrame({"Name": ["gemm"], "Total Time (ns)": [1_500_000]})
    data = DashboardData(runs=RUNS, compare=("tiny-1", "tiny-2"), compare_kernels=(ka, kb))
    panel = compare_panel(data)
    a, b, k = panel.figure.data
    assert list(a.y) == pytest.approx([1.0, 2.0, 0.5]) and list(b.y) == pytest.approx([1.1, 1.9, 0.5])
    assert list(a.marker.color) == [PHASE_COLORS[p] for p in ("forward", "backward", "optimizer")]
    assert list(k.x) == pytest.approx([0.5]) and k.customdata[0, 3] == 500_000
    assert panel.title == "Run comparison: tiny-1 vs tiny-2"


def test_compare_panel_missing_cases() -> None:
    assert "fewer than two" in compare_panel(DashboardData(runs=RUNS.iloc[:1])).missing
    absent = compare_panel(DashboardData(runs=RUNS, compare=("tiny-1", "nope")))
    assert absent.figure is None and "nope" in absent.missing


def test_runs_with_and_without_a_profiler_are_kept_apart_or_marked() -> None:
    """The default pair is made the same way; a pair that is not says so, and its legend
    names the profiler."""
    runs = RUNS.iloc[:3].assign(profiler=["none", "none", "nsys"], nsys_mode=[None, None, "light"])
    runs = pd.concat(
        [runs, runs.iloc[[2]].assign(run_id="tiny-3", profiler="nsys", forward_mean_ns=1_200_000.0)],
        ignore_index=True,
    )
    assert pick_pair(runs) == ("tiny-2", "tiny-3")  # both under nsys, not tiny-1 without it
    mixed = compare_panel(DashboardData(runs=runs, compare=("tiny-1", "tiny-3")))
    assert mixed.notes[0] == (
        "Warning: A ran without a profiler and B under nsys (light): the difference holds the profiler's "
        "overhead as well as any real change; compare runs made the same way (`harness overhead` measures "
        "the overhead itself)."
    )
    assert [t.name for t in mixed.figure.data[:2]] == ["A tiny-1", "B tiny-3 (under nsys (light))"]
    same = compare_panel(DashboardData(runs=runs, compare=("tiny-2", "tiny-3")))
    assert not any(n.startswith("Warning") for n in same.notes)


def test_the_default_pair_is_of_one_shape_and_a_pair_that_is_not_says_so() -> None:
    """Runs of another batch, context or number of ranks are not the newest run's configuration."""
    runs = RUNS.iloc[:3].assign(batch_size=4, context_length=128, world_size=None, attention="sdpa")
    runs = pd.concat(
        [
            runs,
            runs.iloc[[2]].assign(run_id="tiny-ddp", world_size=2),
            runs.iloc[[2]].assign(run_id="tiny-3"),
        ],
        ignore_index=True,
    )
    runs.loc[2, "batch_size"] = 1
    assert pick_pair(runs) == ("tiny-1", "tiny-3")  # not tiny-ddp (2 ranks), nor tiny-2 (batch 1)
    assert compare_panel(DashboardData(runs=runs, compare=("tiny-1", "tiny-3"))).notes[0].startswith("A = ")
    panel = compare_panel(DashboardData(runs=runs, compare=("tiny-2", "tiny-ddp")))
    assert panel.notes[0] == (
        "Warning: A and B are not the same configuration (batch size 1 vs 4, ranks 1 vs 2): the difference "
        "holds that as well as any real change."
    )


def test_generate_runs_of_other_lengths_are_not_the_default_pair_and_say_so_when_named() -> None:
    """Decoding 16 tokens or 2 is another amount of work: the default pair is the newest run's length, and a
    pair named across lengths is warned of (it said A and B differed only in their profiler)."""
    runs = RUNS.iloc[:3].assign(
        mode="generate", batch_size=2, context_length=64, world_size=None, attention="sdpa",
        new_tokens=[16, 2, 16], profiler=["none", "none", "nsys"], nsys_mode=[None, None, "light"],
        prefill_mean_ns=1e6, decode_mean_ns=[8e6, 1e6, 9e6],
    )  # fmt: skip
    runs["model"] = "tiny"
    runs["run_id"] = ["gen-16", "gen-2", "gen-16-nsys"]
    assert pick_pair(runs) == ("gen-16", "gen-16-nsys")  # not gen-2, the newer of the two without nsys
    panel = compare_panel(DashboardData(runs=runs, compare=("gen-2", "gen-16")))
    assert panel.notes[0] == (
        "Warning: A and B are not the same configuration (new tokens 2 vs 16): the difference holds that as "
        "well as any real change."
    )


def test_phase_diff_of_runs_across_ranks_holds_their_all_reduce() -> None:
    steps = pd.DataFrame(
        {
            "run_id": ["tiny-1", "tiny-1", "tiny-1", "tiny-2", "tiny-2"],
            "phase": "allreduce",
            "duration_ns": [9_000_000, 2_000_000, 4_000_000, 5_000_000, 7_000_000],
            "warmup": [True, False, False, False, False],
        }
    )
    d = phase_diff(RUNS, "tiny-1", "tiny-2", steps).set_index("phase")
    assert list(d.index) == ["forward", "backward", "allreduce", "optimizer"]
    assert d.loc["allreduce", "a_ns"] == 3_000_000 and d.loc["allreduce", "b_ns"] == 6_000_000
    panel = compare_panel(DashboardData(runs=RUNS, steps=steps, compare=("tiny-1", "tiny-2")))
    assert list(panel.figure.data[0].x) == ["forward", "backward", "allreduce", "optimizer"]


def test_the_default_pair_matches_a_value_both_runs_lack() -> None:
    """A column both runs leave empty (an older database's) is alike, not a difference."""
    runs = RUNS.iloc[:3].assign(batch_size=[4, 4, 1], context_length=None, world_size=None, attention=None)
    runs = pd.concat([runs, runs.iloc[[0]].assign(run_id="tiny-3")], ignore_index=True)
    assert pick_pair(runs) == ("tiny-1", "tiny-3")  # not tiny-2, of batch 1


def test_a_pair_named_with_a_run_that_stopped_short_says_so() -> None:
    """`--compare` may name a run that ran out of memory, failed or was interrupted after some measured
    steps (the default pair never does): its phase times are those steps', and the panel said nothing."""
    runs = RUNS.iloc[:3].assign(status=["ok", "ok", "interrupted"])
    panel = compare_panel(DashboardData(runs=runs, compare=("tiny-1", "tiny-2")))
    assert panel.figure is not None
    assert panel.notes[0] == (
        "Warning: B (tiny-2) ended interrupted: its times are those of the steps it measured before it "
        "stopped."
    )
    assert not any(
        "ended" in n for n in compare_panel(DashboardData(runs=RUNS, compare=("tiny-1", "tiny-2"))).notes
    )


def test_the_comparison_says_when_one_run_was_slowed_by_its_instrumentation(tmp_path: Path) -> None:
    """tiny fp32 plain, then the same with --nvtx-detail (its timers synchronise around every block): the
    default pair compared them with no warning, so the detail run's slower steps read as a regression."""
    from dashboard_data import result

    from harness.experiments import pages

    store = ResultsStore(str(tmp_path / "results.sqlite"))
    save_run(store, result("tiny-plain", "tiny", "fp32", [(1_000_000, 2_000_000, 500_000)]))
    detail = result("tiny-detail", "tiny", "fp32", [(3_000_000, 6_000_000, 500_000)])
    detail.config.nvtx_detail = True
    save_run(store, detail)
    page, _, _ = pages.runs_dashboard(store, tmp_path / "dash.html")
    panel = next(p for p in page.panels if p.key == "compare")
    assert panel.title == "Run comparison: tiny-plain vs tiny-detail"
    assert panel.notes[0] == (
        "Warning: A and B are not the same configuration (step slowed by nothing vs --nvtx-detail): the "
        "difference holds that as well as any real change."
    )
