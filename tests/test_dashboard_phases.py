"""Panels 1 and 2: mean phase time per model and setting, and per-step distributions."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from dashboard_data import fill

from analysis.dashboard.panel import DashboardData
from analysis.dashboard.phases import (
    distribution_figure,
    distribution_panel,
    distribution_table,
    inference_bars_panel,
    phase_bars_panel,
    phase_means,
)
from analysis.dashboard.style import PHASE_COLORS
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> ResultsStore:
    s = ResultsStore(str(tmp_path_factory.mktemp("db") / "results.sqlite"))
    fill(s)
    return s


def _trace(fig, name: str, xaxis: str = "x"):
    found = [t for t in fig.data if t.name == name and t.xaxis == xaxis]
    assert len(found) == 1, [(t.name, t.xaxis) for t in fig.data]
    return found[0]


def test_phase_means_takes_newest_unprofiled_run_per_config(store: ResultsStore) -> None:
    table = phase_means(store.runs())
    tiny = table[(table["model"] == "tiny") & (table["setting"] == "fp32")].set_index("phase")
    # tiny fp32 has a sweep run, an overhead baseline (newest without nsys) and two nsys runs
    assert tiny.loc["forward", "run_id"] == "tiny-fp32-ovh000"
    assert tiny.loc["forward", "mean_ns"] == 1_000_000
    small = table[(table["model"] == "small") & (table["setting"] == "fp32")].set_index("phase")
    assert small.loc["backward", "mean_ns"] == 6_200_000
    assert small.loc["backward", "std_ns"] == pytest.approx(statistics.stdev([6_000_000, 6_400_000]))
    oom = table[(table["model"] == "small") & (table["setting"] == "bf16")]
    assert list(oom["status"]) == ["oom"] and oom["phase"].isna().all()


def test_phase_bars_hold_means_errors_and_oom(store: ResultsStore) -> None:
    panel = phase_bars_panel(DashboardData(runs=store.runs()))
    fig = panel.figure
    assert [a.text for a in fig.layout.annotations] == ["fp32", "bf16"]
    fwd = _trace(fig, "forward", "x")
    assert dict(zip(fwd.x, fwd.y, strict=True)) == pytest.approx({"tiny": 1.0, "small": 3.2})
    assert fwd.marker.color == PHASE_COLORS["forward"]
    assert sorted(fwd.customdata[:, 0]) == [1_000_000, 3_200_000]  # exact ns for the hover
    assert "ms" in fwd.hovertemplate and "ns" in fwd.hovertemplate
    back = _trace(fig, "backward", "x")
    errors = dict(zip(back.x, back.error_y.array, strict=True))
    assert errors["small"] == pytest.approx(statistics.stdev([6.0, 6.4]))
    oom = _trace(fig, "OOM / failed (no time)", "x2")
    assert list(oom.x) == ["small"] and list(oom.text) == ["OOM"]
    # the OOM model stays on the bf16 axis, not dropped, and is not drawn as a zero-height bar
    assert list(fig.layout.xaxis2.categoryarray) == ["tiny", "small"]
    assert all(t.type == "scatter" for t in fig.data if t.xaxis == "x2" and "small" in list(t.x))
    assert fig.layout.yaxis.title.text == "mean time per step (ms)"


def test_phase_bars_say_what_is_missing_without_runs() -> None:
    panel = phase_bars_panel(DashboardData())
    assert panel.figure is None
    assert "harness sweep" in panel.missing


def test_distribution_marks_warmup_steps(store: ResultsStore) -> None:
    runs = store.runs()
    table = distribution_table(store.step_timings(), runs)
    assert table["label"].nunique() == 6  # the OOM run has no steps
    fig = distribution_figure(table)
    box = next(t for t in fig.data if t.type == "box" and t.name == "forward")
    warm = next(t for t in fig.data if t.name == "warm-up step" and t.xaxis == "x")
    label = table.loc[table["run_id"] == "small-fp32-sweep01", "label"].iloc[0]
    # horizontal boxes: the run on y, its times on x
    measured = [x for x, y in zip(box.x, box.y, strict=True) if y == label]
    assert measured == pytest.approx([3.0, 3.4])
    warm_x = [x for x, y in zip(warm.x, warm.y, strict=True) if y == label]
    assert warm_x == pytest.approx([9.0])  # the fixture's warm-up step is 3x the first measured one
    assert warm.marker.color == box.marker.color == PHASE_COLORS["forward"]
    assert [a.text for a in fig.layout.annotations] == [
        "forward (own time axis)",
        "backward (own time axis)",
        "optimizer (own time axis)",
    ]
    assert fig.layout.xaxis2.title.text == "backward per step (ms)"


def test_distribution_shows_which_runs_were_profiled(store: ResultsStore) -> None:
    table = distribution_table(store.step_timings(), store.runs())
    profiled = table.drop_duplicates("run_id").set_index("run_id")
    assert profiled.loc["tiny-fp32-prof01", "profiled"] == "nsys light"
    assert profiled.loc["tiny-fp32-prof01", "label"].endswith(" · nsys light")
    assert profiled.loc["tiny-fp32-sweep01", "profiled"] == ""
    fig = distribution_figure(table)
    under = next(t for t in fig.data if t.name == "forward · under a profiler")
    assert set(under.y) == {
        profiled.loc["tiny-fp32-prof01", "label"],
        profiled.loc["tiny-fp32-ovh001", "label"],
    }
    assert under.marker.symbol == "diamond-open"
    notes = distribution_panel(DashboardData(runs=store.runs(), steps=store.step_timings())).notes
    assert any("own time axis" in n for n in notes) and any("under a profiler" in n for n in notes)


def test_phase_bars_give_each_setting_its_own_axis_and_a_log_button(store: ResultsStore) -> None:
    fig = phase_bars_panel(DashboardData(runs=store.runs())).figure
    assert fig.layout.yaxis2.matches is None  # not shared with the fp32 facet
    (menu,) = fig.layout.updatemenus
    assert [b.label for b in menu.buttons] == ["linear", "log"]
    log = menu.buttons[1].args[0]
    assert (log["yaxis.type"], log["yaxis2.type"]) == ("log", "log")
    assert menu.buttons[0].args[0] == {
        "yaxis.type": "linear", "yaxis2.type": "linear", "yaxis.autorange": True, "yaxis2.autorange": True
    }  # fmt: skip


def test_generate_runs_are_kept_out_of_the_training_panel(tmp_path) -> None:
    from dashboard_data import MODELS, result

    from harness.core.records import StepRecord

    store = ResultsStore(str(tmp_path / "results.sqlite"))
    save_run(store, result("tiny-train", "tiny", "fp32", [(1_000_000, 2_000_000, 500_000)]))
    gen = result("tiny-gen", "tiny", "fp32", [(1, 1, 1)])
    gen.config.mode = "generate"
    gen.model = MODELS["tiny"]
    gen.steps = [StepRecord(0, False, {"prefill": 4_000_000, "decode": 30_000_000})]
    save_run(store, gen)
    runs = store.runs()
    train = phase_means(runs)
    assert set(train["run_id"]) == {"tiny-train"} and set(train["phase"]) == {
        "forward",
        "backward",
        "optimizer",
    }
    panel = inference_bars_panel(DashboardData(runs=runs))
    fig = panel.figure
    assert sorted(t.name for t in fig.data) == ["decode", "prefill"]
    assert next(t for t in fig.data if t.name == "decode").y[0] == pytest.approx(30.0)
    # prefill (4 ms) beside decode (30 ms): a log axis from the start, the linear one a button away
    assert fig.layout.yaxis.type == "log" and fig.layout.updatemenus[0].active == 1
    # the axis starts a decade below the prefill bar (4 ms), so that bar keeps a visible height
    assert fig.layout.yaxis.range[0] == pytest.approx(np.log10(4.0) - 1)
    assert panel.notes[0].startswith("Log scale: prefill and decode differ by orders of magnitude")
    assert phase_bars_panel(DashboardData(runs=runs)).figure.layout.yaxis.type in (None, "linear", "-")
    assert (
        "harness run tiny --mode generate" in inference_bars_panel(DashboardData(runs=runs.iloc[:1])).missing
    )


def test_distribution_panel_limits_runs_and_notes_it() -> None:
    runs = pd.DataFrame(
        {
            "run_id": [f"r{i:02d}" for i in range(15)],
            "model": "tiny",
            "precision": "fp32",
            "compile": False,
            "device": "cpu",
            "status": "ok",
        }
    )
    steps = pd.DataFrame(
        {"run_id": runs["run_id"], "step": 0, "phase": "forward", "duration_ns": range(15), "warmup": False}
    )
    panel = distribution_panel(DashboardData(runs=runs, steps=steps))
    box = panel.figure.data[0]
    assert len(box.x) == 12 and box.x[0] == pytest.approx(3e-6)  # the newest 12: r03 … r14
    assert "The newest 12 of 15 runs with step timings; pick others with --runs or --last." in panel.notes


def test_distribution_panel_counts_only_the_runs_it_can_draw() -> None:
    """Runs without step timings (failed before a step) are not among those the box plot left out."""
    runs = pd.DataFrame(
        {"run_id": [f"r{i:02d}" for i in range(15)], "model": "tiny", "precision": "fp32", "compile": False,
         "device": "cpu", "status": ["failed"] * 10 + ["ok"] * 5}
    )  # fmt: skip
    steps = pd.DataFrame(
        {
            "run_id": runs["run_id"][10:],
            "step": 0,
            "phase": "forward",
            "duration_ns": range(5),
            "warmup": False,
        }
    )
    panel = distribution_panel(DashboardData(runs=runs, steps=steps))
    assert len(panel.figure.data[0].x) == 5
    assert not any("newest" in n for n in panel.notes)


def test_box_plot_labels_have_room_at_the_default_size(store: ResultsStore) -> None:
    """Run labels on the left, one unrotated line each, at least LABEL_ROW_PX apart whatever the
    number of runs, shown once per row of facets (shared), never thinned out."""
    from analysis.dashboard.phases import LABEL_ROW_PX

    table = distribution_table(store.step_timings(), store.runs())
    fig = distribution_figure(table)
    labels = list(dict.fromkeys(table["label"]))
    assert all(t.orientation == "h" for t in fig.data if t.type == "box")
    axis = fig.layout.yaxis
    assert axis.tickangle == 0 and axis.dtick == 1 and list(axis.categoryarray) == labels[::-1]
    assert fig.layout.yaxis2.matches == "y" and not fig.layout.yaxis2.showticklabels  # labels once a row
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b  # the facets' share
    assert plot_px / len(labels) >= LABEL_ROW_PX - 1e-9
    many = pd.concat([table.assign(label=table["label"] + f" #{i}") for i in range(4)], ignore_index=True)
    bigger = distribution_figure(many)
    assert bigger.layout.height >= 4 * len(labels) * LABEL_ROW_PX  # the figure grows with the runs


# three settings, so three y-axes: the figure of phase_bars_figure as JSON, built in a fresh process
THREE_SETTINGS_FIGURE = """
import pandas as pd
from analysis.dashboard.phases import phase_bars_figure
rows = [
    {"model": "tiny", "setting": s, "phase": "forward", "mean_ns": 1e6 * (i + 1), "std_ns": 1e4,
     "status": "ok", "run_id": f"tiny-{s}"}
    for i, s in enumerate(["fp32", "bf16", "fp16"])
]
print(phase_bars_figure(pd.DataFrame(rows)).to_json())
"""


def test_phase_bars_are_the_same_bytes_in_every_process() -> None:
    # the scale buttons named the y-axes in the order plotly's layout iterates them: a set of names, so
    # another order in each process (PYTHONHASHSEED) and a page that differed from one run to the next
    def figure(seed: str) -> str:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", THREE_SETTINGS_FIGURE], env=env, capture_output=True, text=True, check=True
        )
        return done.stdout

    first, *others = (figure(seed) for seed in ("1", "2", "3"))
    assert all(other == first for other in others)
    (menu,) = json.loads(first)["layout"]["updatemenus"]
    assert list(menu["buttons"][0]["args"][0]) == [
        "yaxis.type", "yaxis2.type", "yaxis3.type", "yaxis.autorange", "yaxis2.autorange", "yaxis3.autorange"
    ]  # fmt: skip


def test_a_run_across_ranks_draws_its_all_reduce(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The all-reduce has no column of the runs: its bar comes from the measured steps of every rank."""
    from dashboard_data import result

    from harness.core.records import StepRecord

    run = result("tiny-ddp", "tiny", "fp32", [(1_000_000, 2_000_000, 500_000)] * 2)
    run.config.nproc = 2
    run.steps = [
        StepRecord(step, step == 0, {"forward": 1_000_000, "backward": 2_000_000, "allreduce": ns,
                                     "optimizer": 500_000}, rank=rank)
        for rank, per_step in ((0, (9_000_000, 3_000_000, 5_000_000)), (1, (9_000_000, 4_000_000, 6_000_000)))
        for step, ns in enumerate(per_step)
    ]  # fmt: skip
    store = ResultsStore(str(tmp_path / "results.sqlite"))
    save_run(store, run)
    panel = phase_bars_panel(DashboardData(runs=store.runs(), steps=store.step_timings()))
    assert [t.name for t in panel.figure.data] == ["forward", "backward", "allreduce", "optimizer"]
    allreduce = _trace(panel.figure, "allreduce")
    assert list(allreduce.y) == pytest.approx([4.5])  # ms: 3, 5, 4 and 6 ms, the warm-up steps left out
    assert allreduce.customdata[0][1] == pytest.approx(statistics.stdev([3e6, 5e6, 4e6, 6e6]))


def test_eager_and_cuda_graph_decode_of_one_model_are_drawn_side_by_side(tmp_path) -> None:
    """tiny generate fp32, eager then --cuda-graphs: the prefill / decode panel drew the newest alone (one
    configuration to it), so the two decode paths it exists to compare were never seen together. Each has
    its setting (`fp32`, `fp32+cuda-graphs`); a run that measured no step (no decode path) counts as eager."""
    from dashboard_data import MODELS, result

    from analysis.dashboard.runs import setting_order
    from harness.core.records import StepRecord
    from workloads.names import CUDA_GRAPH_DECODE

    store = ResultsStore(str(tmp_path / "results.sqlite"))
    for run_id, decode_ns, path in (
        ("tiny-eager", 30_000_000, "eager (growing KV cache)"),
        ("tiny-graphs", 10_000_000, CUDA_GRAPH_DECODE),
    ):
        gen = result(run_id, "tiny", "fp32", [(1, 1, 1)])
        gen.config.mode, gen.config.new_tokens, gen.model = "generate", 2, MODELS["tiny"]
        gen.steps = [StepRecord(0, False, {"prefill": 4_000_000, "decode": decode_ns}, tokens=[decode_ns])]
        gen.extra["serving"] = {"decode": path}
        save_run(store, gen)
    means = phase_means(store.runs(), modes=("generate",))
    decode = means[means["phase"] == "decode"].set_index("setting")
    assert decode["run_id"].to_dict() == {"fp32": "tiny-eager", "fp32+cuda-graphs": "tiny-graphs"}
    assert decode["mean_ns"].to_dict() == {"fp32": 30_000_000.0, "fp32+cuda-graphs": 10_000_000.0}
    assert setting_order(pd.Series(["bf16", "fp32+cuda-graphs", "fp32+compile", "fp32"])) == [
        "fp32", "fp32+compile", "fp32+cuda-graphs", "bf16"
    ]  # fmt: skip


def test_phase_bars_of_programs_only_do_not_say_the_database_is_empty() -> None:
    """Runs of `harness profile -- CMD` are in the database but time no phase: the panel says so, not that
    there are no runs."""
    runs = pd.DataFrame(
        [{"run_id": "python-1", "model": "python", "mode": "program", "status": "ok", "profiler": "nsys",
          "precision": "n/a", "device": "n/a", "compile": False, "created_at": "2026-01-01T00:00:00+00:00"}]
    )  # fmt: skip
    missing = phase_bars_panel(DashboardData(runs=runs)).missing
    assert missing.startswith("no timed runs: runs of `profile -- CMD` time no phase")
    assert "no runs in the results database" not in missing


def test_a_run_stopped_by_its_user_does_not_hide_its_configurations_finished_runs(tmp_path) -> None:
    """tiny generate fp32 measured (ok), then run again and stopped with SIGTERM after one step: the prefill
    / decode panel drew the configuration as `INTERRUPTED` under "OOM / failed (no time)", the finished run
    out of sight. A finished run is the configuration's; one stopped short stands only where it is all
    there is."""
    from dashboard_data import MODELS, result

    from harness.core.records import StepRecord

    store = ResultsStore(str(tmp_path / "results.sqlite"))
    for run_id, status, decode_ns in (
        ("tiny-done", "ok", 30_000_000),
        ("tiny-stopped", "interrupted", 90_000_000),
    ):
        gen = result(run_id, "tiny", "fp32", [(1, 1, 1)])
        gen.status, gen.config.mode, gen.config.new_tokens, gen.model = status, "generate", 2, MODELS["tiny"]
        gen.steps = [StepRecord(0, False, {"prefill": 4_000_000, "decode": decode_ns}, tokens=[decode_ns])]
        save_run(store, gen)
    means = phase_means(store.runs(), modes=("generate",))
    assert means.set_index("phase")["run_id"].to_dict() == {"prefill": "tiny-done", "decode": "tiny-done"}
    assert means.set_index("phase").loc["decode", "mean_ns"] == 30_000_000
    alone = phase_means(store.runs().iloc[[1]], modes=("generate",))
    assert list(alone["status"]) == ["interrupted"]


def test_runs_of_one_model_at_several_batch_sizes_are_each_drawn(tmp_path) -> None:
    """`harness sweep --batch-sizes 1,2` stores one run per batch size: the phase and throughput panels
    drew the newest alone (one configuration to them), so batch 1 was lost from the page. Each batch size
    is a configuration of its own, named in its setting; natural order (batch 2 before batch 16)."""
    from dashboard_data import result

    from analysis.dashboard.runs import setting_order
    from analysis.dashboard.throughput import throughput_table

    store = ResultsStore(str(tmp_path / "results.sqlite"))
    for batch, forward_ns in ((1, 1_000_000), (2, 1_500_000), (16, 9_000_000)):
        run = result(f"tiny-b{batch}", "tiny", "fp32", [(forward_ns, 2 * forward_ns, 500_000)])
        run.config.batch_size = batch
        run.tokens_per_s = 1000.0 * batch
        save_run(store, run)
    save_run(
        store, result("small-b4", "small", "fp32", [(3_000_000, 6_000_000, 1_000_000)])
    )  # one batch size
    runs = store.runs()
    forward = phase_means(runs).query("phase == 'forward'").set_index("run_id")
    settings = ["batch 1 fp32", "batch 2 fp32", "batch 4 fp32", "batch 16 fp32"]
    ids = ["tiny-b1", "tiny-b2", "small-b4", "tiny-b16"]
    assert forward["setting"].to_dict() == dict(zip(ids, settings, strict=True))
    assert forward["mean_ns"].to_dict() == {
        "tiny-b1": 1_000_000.0, "tiny-b2": 1_500_000.0, "tiny-b16": 9_000_000.0, "small-b4": 3_000_000.0
    }  # fmt: skip
    assert throughput_table(runs).set_index("run_id")["tokens_per_s"].to_dict() == {
        "tiny-b1": 1000.0, "tiny-b2": 2000.0, "tiny-b16": 16000.0, "small-b4": 1000.0
    }  # fmt: skip
    assert setting_order(forward["setting"]) == settings
    fig = phase_bars_panel(DashboardData(runs=runs)).figure
    assert [a.text for a in fig.layout.annotations] == settings


def test_each_model_at_its_own_context_length_keeps_plain_settings(store: ResultsStore) -> None:
    """Models of a sweep run at their own default context lengths (and a generate run's prompt is shorter
    than a training run's): the setting names a context length only where one model's runs hold several."""
    table = phase_means(store.runs())
    assert set(table["setting"]) == {"fp32", "bf16"}


@pytest.mark.parametrize(
    "setup",
    [{"nvtx_detail": True}, {"memory": True}, {"plant": "host-sync"}],
    ids=["nvtx-detail", "memory", "plant"],
)
def test_a_run_slowed_by_what_it_measured_does_not_stand_for_its_configuration(tmp_path, setup) -> None:
    """tiny fp32, a plain run and then one of --nvtx-detail (timers synchronised around every block),
    --memory or a plant: the phase and throughput panels drew the newest, three times slower, as the
    configuration's time. The plain run stands for it; small's slowed run, the only one of its
    configuration, is drawn."""
    from dashboard_data import result

    from harness.experiments import pages

    store = ResultsStore(str(tmp_path / "results.sqlite"))
    save_run(
        store, result("tiny-plain", "tiny", "fp32", [(1_000_000, 2_000_000, 500_000)], tokens_per_s=900.0)
    )
    slowed = result("tiny-slowed", "tiny", "fp32", [(3_000_000, 6_000_000, 500_000)], tokens_per_s=300.0)
    alone = result("small-slowed", "small", "fp32", [(3_000_000, 6_000_000, 1_000_000)])
    for run in (slowed, alone):
        for key, value in setup.items():
            setattr(run.config, key, value)
        save_run(store, run)
    page, held, _ = pages.runs_dashboard(store, tmp_path / "dash.html")
    assert held == 3
    panels = {p.key: p for p in page.panels}
    bars = next(t for t in panels["phases"].figure.data if t.name == "forward")
    assert dict(zip(bars.x, (row[2] for row in bars.customdata), strict=True)) == {
        "tiny": "tiny-plain",
        "small": "small-slowed",
    }
    tokens = next(t for t in panels["throughput"].figure.data if t.xaxis == "x")
    assert dict(zip(tokens.x, tokens.y, strict=True)) == {"tiny": 900.0, "small": 1000.0}


def test_generate_runs_of_several_new_token_counts_are_each_drawn(tmp_path) -> None:
    """tiny generate fp32 of 2 and of 6 new tokens: the prefill / decode and throughput panels drew the
    newest alone (one configuration to them), though decode's time and the output tokens/s depend on the
    tokens decoded. Each count is a configuration of its own, named in its setting (the serving panel's
    labels too)."""
    from dashboard_data import MODELS, result

    from analysis.dashboard.runs import with_labels
    from analysis.dashboard.throughput import throughput_table
    from harness.core.records import StepRecord

    store = ResultsStore(str(tmp_path / "results.sqlite"))
    for new_tokens in (2, 6):
        gen = result(f"tiny-n{new_tokens}", "tiny", "fp32", [(1, 1, 1)])
        gen.config.mode, gen.config.new_tokens, gen.model = "generate", new_tokens, MODELS["tiny"]
        decode_ns = 10_000_000 * (new_tokens - 1)
        tokens = [10_000_000] * (new_tokens - 1)
        gen.steps = [StepRecord(0, False, {"prefill": 4_000_000, "decode": decode_ns}, tokens=tokens)]
        gen.tokens_per_s = 100.0 * new_tokens
        save_run(store, gen)
    runs = store.runs()
    decode = phase_means(runs, modes=("generate",)).query("phase == 'decode'").set_index("setting")
    assert decode["run_id"].to_dict() == {"new tokens 2 fp32": "tiny-n2", "new tokens 6 fp32": "tiny-n6"}
    means = decode["mean_ns"].to_dict()
    assert means == {"new tokens 2 fp32": 10_000_000.0, "new tokens 6 fp32": 50_000_000.0}
    assert throughput_table(runs).set_index("run_id")["tokens_per_s"].to_dict() == {
        "tiny-n2": 200.0,
        "tiny-n6": 600.0,
    }
    labels = with_labels(runs).set_index("run_id")["label"].to_dict()  # the serving panel's bars
    assert [("new tokens 2" in labels[r], "new tokens 6" in labels[r]) for r in ("tiny-n2", "tiny-n6")] == [
        (True, False),
        (False, True),
    ]


def test_a_phase_panel_of_many_settings_is_drawn() -> None:
    """20 settings (a generate sweep over batch sizes and new tokens names each in its setting): plotly
    refused the gap between 20 facets (at most 1 / 19 of the width), and the prefill / decode panel failed
    with a ValueError. Each setting is still a facet, the gap narrowed to fit."""
    from analysis.dashboard.phases import phase_bars_figure

    settings = [f"batch {b} new tokens {n} fp32" for b in (1, 2, 4, 8) for n in (2, 4, 8, 16, 32)]
    table = pd.DataFrame(
        [{"model": "tiny", "setting": s, "phase": p, "mean_ns": 1e6, "std_ns": 0.0, "status": "ok",
          "run_id": f"r{i}"} for i, s in enumerate(settings) for p in ("prefill", "decode")]
    )  # fmt: skip
    fig = phase_bars_figure(table, log=True)
    assert [a.text for a in fig.layout.annotations][: len(settings)] == settings
