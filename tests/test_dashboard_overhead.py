"""Panel 3: profiler overhead per phase and NVTX-vs-timer agreement."""

from __future__ import annotations

import pandas as pd
import pytest
from dashboard_data import fill

from analysis.dashboard.overhead import (
    agreement_panel,
    overhead_bars,
    overhead_figure,
    overhead_panel,
    overhead_runs,
)
from analysis.dashboard.panel import DashboardData
from analysis.dashboard.style import PHASE_COLORS
from harness.store.results import ResultsStore


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> DashboardData:
    store = ResultsStore(str(tmp_path_factory.mktemp("db") / "results.sqlite"))
    fill(store)
    return DashboardData(runs=store.runs(), steps=store.step_timings(), agreement=store.agreement())


def test_overhead_uses_the_overhead_experiment(data: DashboardData) -> None:
    runs, source = overhead_runs(data.runs)
    assert list(runs["run_id"]) == ["tiny-fp32-ovh000", "tiny-fp32-ovh001"]
    assert source == "experiment overhead-1"
    fig = overhead_panel(data).figure
    base, nsys, verdicts = fig.data
    assert (base.name, nsys.name) == ("no nsys", "nsys light")
    assert list(base.x) == ["forward", "backward", "optimizer", "step (sum)"]
    assert list(base.y) == pytest.approx([1.0, 2.0, 0.5, 3.5])
    assert list(nsys.y) == pytest.approx([1.1, 2.2, 0.55, 3.85])
    # every step of a run took the same time: the interval is the point, and the verdict is on the bar
    assert list(verdicts.text) == ["adds +10.0% (CI +10.0…+10.0%)"] * 4
    assert verdicts.mode == "text" and verdicts.offsetgroup == nsys.offsetgroup  # over the nsys bars
    assert list(verdicts.y) == pytest.approx(list(nsys.y))  # no spread: the whisker ends at the mean
    assert nsys.customdata[3, 3] == "nsys light adds 10.0% (CI +10.0…+10.0%)"
    assert list(base.marker.color[:3]) == [PHASE_COLORS[p] for p in ("forward", "backward", "optimizer")]
    assert nsys.marker.pattern.shape == "/"
    notes = overhead_panel(data).notes
    assert "Whole steps: nsys light adds 10.0% (CI +10.0…+10.0%)." in notes
    assert "backward: nsys light adds 10.0% (CI +10.0…+10.0%)." in notes  # every phase's verdict
    assert any("One run on a side" in n for n in notes)


def test_overhead_bars_say_inconclusive_and_keep_whiskers_above_zero() -> None:
    # the case: a baseline whose std is about its mean, two runs a side of three steps
    rows = []
    for label, steps in (
        ("no nsys", [[100, 900, 40], [60, 120, 80]]),
        ("nsys light", [[150, 130, 160], [140, 170, 155]]),
    ):
        for repeat, durations in enumerate(steps):
            rows += [(label, repeat, i, "forward", ns * 1_000_000) for i, ns in enumerate(durations)]
    steps = pd.DataFrame(rows, columns=["label", "repeat", "step", "phase", "duration_ns"])
    table = overhead_bars(steps, ["forward"])
    nsys = table[table["label"] == "nsys light"].iloc[0]
    assert nsys["outcome"] == "inconclusive"
    assert nsys["short"] == f"inconclusive (CI {nsys['ci_low_pct']:+.1f}…{nsys['ci_high_pct']:+.1f}%)"
    assert nsys["verdict"].startswith("inconclusive: the noise (±")
    base = table[table["label"] == "no nsys"].iloc[0]
    assert base["low_ns"] < 0  # the interval of a mean whose std exceeds it reaches below zero …
    fig = overhead_figure(table)
    bar = fig.data[0]
    assert bar.error_y.arrayminus[0] == pytest.approx(bar.y[0])  # … but its whisker stops at zero
    assert list(fig.data[2].text) == [nsys["short"]]
    assert fig.data[2].y[0] == pytest.approx(nsys["high_ns"] / 1e6)  # above the whisker's top


def test_overhead_prefers_an_alternated_experiment_to_a_newer_single_pair() -> None:
    runs = pd.DataFrame(
        {
            "run_id": ["a0", "a1", "a2", "a3", "p0", "p1"],
            "experiment": ["overhead-alt"] * 4 + ["overhead-p1"] * 2,  # the run --nsys pair is newer
            "profiler": ["none", "nsys", "none", "nsys", "none", "nsys"],
            "status": "ok",
        }
    )
    chosen, source = overhead_runs(runs)
    assert list(chosen["run_id"]) == ["a0", "a1", "a2", "a3"] and source == "experiment overhead-alt"
    chosen, source = overhead_runs(runs[runs["experiment"] == "overhead-p1"])
    assert source == "experiment overhead-p1"


def test_overhead_falls_back_to_separate_runs_of_one_config(data: DashboardData) -> None:
    runs = data.runs[~data.runs["experiment"].fillna("").str.startswith("overhead-")]
    chosen, source = overhead_runs(runs)
    assert set(chosen["run_id"]) == {"tiny-fp32-sweep01", "tiny-fp32-prof01"}
    assert "not alternated" in source
    fig = overhead_panel(DashboardData(runs=runs, steps=data.steps)).figure
    assert list(fig.data[0].y[:1]) == pytest.approx([1.1])  # the sweep run's forward mean (1.0, 1.2 ms)


def test_separate_generate_runs_of_other_lengths_are_not_one_configuration() -> None:
    """A generate run decoding 16 tokens without a profiler and one decoding 2 under nsys time different
    work: their difference is no overhead (the panel called them "separate runs of the same configuration");
    runs of one length are, unless their attention differs."""
    base = {"model": "tiny", "mode": "generate", "device": "cpu", "precision": "fp32", "compile": False,
            "batch_size": 2, "context_length": 64, "attention": "sdpa", "status": "ok",
            "experiment": None}  # fmt: skip
    runs = pd.DataFrame(
        [
            {**base, "run_id": "gen-16", "profiler": "none", "new_tokens": 16},
            {**base, "run_id": "gen-2-nsys", "profiler": "nsys", "new_tokens": 2},
        ]
    )
    assert overhead_runs(runs)[0].empty
    same = pd.concat([runs, runs.iloc[[0]].assign(run_id="gen-2", new_tokens=2)], ignore_index=True)
    chosen, source = overhead_runs(same)
    assert list(chosen["run_id"]) == ["gen-2-nsys", "gen-2"] and "not alternated" in source
    math = same.assign(attention=["sdpa", "sdpa", "math"])
    assert overhead_runs(math)[0].empty


def test_overhead_missing_without_profiled_runs(data: DashboardData) -> None:
    runs = data.runs[data.runs["profiler"] == "none"]
    panel = overhead_panel(DashboardData(runs=runs, steps=data.steps))
    assert panel.figure is None and "harness overhead" in panel.missing


def test_agreement_bars_hold_relative_difference(data: DashboardData) -> None:
    fig = agreement_panel(data).figure
    fwd = next(t for t in fig.data if t.name == "forward")
    assert list(fwd.y) == pytest.approx([1.0])  # percent
    assert fwd.customdata[0, 0] == 1_111_000 and fwd.customdata[0, 2] == 1_100_000
    assert fwd.marker.color == PHASE_COLORS["forward"]
    assert "prof01" in fwd.x[0]


def test_agreement_missing_says_how_to_get_it() -> None:
    panel = agreement_panel(DashboardData(agreement=pd.DataFrame(columns=["run_id", "phase"])))
    assert panel.figure is None and "harness run tiny" in panel.missing and "--nsys" in panel.missing


def test_agreement_missing_with_only_program_runs_says_they_have_no_timers() -> None:
    """A database whose only profiled runs are `profile -- CMD` programs: the panel said "no profiled runs"
    of a database that has two."""
    runs = pd.DataFrame(
        {"run_id": ["tiny-1", "python-1", "python-2"], "profiler": ["none", "nsys", "nsys"],
         "mode": ["train", "program", "program"], "status": "ok"}
    )  # fmt: skip
    panel = agreement_panel(DashboardData(runs=runs, agreement=pd.DataFrame(columns=["run_id", "phase"])))
    assert panel.figure is None
    assert panel.missing.startswith("no profiled run with timers: runs of `profile -- CMD` time no phase")
    assert "harness run tiny --device cpu --nsys" in panel.missing


def test_a_run_across_ranks_keeps_each_rank_s_steps_apart() -> None:
    """Whole steps are one rank's phases summed, never two ranks': step 1 of rank 0 and of rank 1 are two
    steps of the bars, as in every other overhead table."""
    from analysis.dashboard.overhead import labelled_steps

    runs = pd.DataFrame(
        {"run_id": ["base", "prof"], "profiler": ["none", "nsys"], "nsys_mode": [None, "light"]}
    )
    steps = pd.DataFrame(
        [(rid, step, phase, ns * (1.1 if rid == "prof" else 1.0), False, rank)
         for rid in ("base", "prof") for rank in (0, 1) for step in (1, 2, 3)
         for phase, ns in (("forward", 1_000 * (rank + 1)), ("backward", 2_000))],
        columns=["run_id", "step", "phase", "duration_ns", "warmup", "rank"],
    )  # fmt: skip
    labelled = labelled_steps(runs, steps)
    assert labelled.groupby("label")["step"].nunique().to_dict() == {"no nsys": 6, "nsys light": 6}
    whole = overhead_bars(labelled, ["forward", "backward"]).set_index(["row", "label"])
    assert whole.loc[("step (sum)", "no nsys"), "mean_ns"] == pytest.approx((3_000 + 4_000) / 2)
