"""analysis.runs.energy: integrating power, undoing counter wrap-around, joules per run and phase."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.runs.energy import (
    ENERGY_COLUMNS,
    RUN_ENERGY_FIELDS,
    energy_table,
    integrate,
    power_series,
    run_summary,
    run_window,
)
from harness.energy.power import counter_increments, unwrap_counter

S = 1_000_000_000  # ns per second


def power(device: str, t_s: list[float], watts: list[float], tick0: int = 0) -> pd.DataFrame:
    return pd.DataFrame(
        {"device": device, "tick": range(tick0, tick0 + len(t_s)), "t_ns": [int(t * S) for t in t_s],
         "power_w": watts, "energy_j": np.nan}
    )  # fmt: skip


def counter(device: str, t_s: list[float], joules: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        {"device": device, "tick": range(len(t_s)), "t_ns": [int(t * S) for t in t_s], "power_w": np.nan,
         "energy_j": joules}
    )  # fmt: skip


def phases(*rows: tuple[int, str, float, float]) -> pd.DataFrame:
    return pd.DataFrame(
        [(step, phase, int(a * S), int(b * S)) for step, phase, a, b in rows],
        columns=["step", "phase", "start_ns", "end_ns"],
    )


# --- the arithmetic ---------------------------------------------------------------------------------------


def test_constant_power_integrates_to_watts_times_seconds() -> None:
    assert integrate(power("gpu0", [0, 0.5, 1, 2], [100, 100, 100, 100])) == pytest.approx(200.0)


def test_a_ramp_integrates_to_its_triangle_and_window_ends_are_interpolated() -> None:
    ramp = power("gpu0", [0, 1], [0, 100])
    assert integrate(ramp) == pytest.approx(50.0)
    # from 0.5 s (50 W) to 1 s (100 W): (50 + 100) / 2 · 0.5 s
    assert integrate(ramp, 0.5 * S, 1 * S) == pytest.approx(37.5)
    # inside one sample period: 0.25 s (25 W) to 0.75 s (75 W)
    assert integrate(ramp, 0.25 * S, 0.75 * S) == pytest.approx(25.0)


def test_a_known_series_integrates_by_the_trapezoid_rule() -> None:
    t = [0, 0.05, 0.10, 0.15, 0.20]
    w = [70, 310, 655, 690, 700]
    by_hand = 0.05 * ((70 + 310) + (310 + 655) + (655 + 690) + (690 + 700)) / 2  # 102 J
    assert integrate(power("gpu0", t, w)) == pytest.approx(by_hand) == pytest.approx(102.0)


def test_no_numbers_are_made_up_outside_the_samples() -> None:
    ramp = power("gpu0", [1, 2], [0, 100])
    assert math.isnan(integrate(ramp, 0.5 * S, 2 * S))
    assert math.isnan(integrate(ramp, 1 * S, 3 * S))
    assert math.isnan(integrate(power("gpu0", [1], [100])))
    assert math.isnan(integrate(power("gpu0", [1, 2], [np.nan, np.nan])))


def test_counter_wrap_around_adds_the_range() -> None:
    # RAPL: energy_uj runs up to max_energy_range_uj, then starts again from 0
    assert counter_increments([900, 950, 30, 80], wrap=1000).tolist() == [50, 80, 50]
    assert unwrap_counter([900, 950, 30, 80], wrap=1000).tolist() == [0, 50, 130, 180]
    # two wraps between samples cannot be told apart from one: sample faster than the counter wraps
    assert unwrap_counter([10, 20, 30], wrap=1000).tolist() == [0, 10, 20]


def test_a_counter_going_backwards_without_a_known_range_is_an_error() -> None:
    with pytest.raises(ValueError, match="went backwards"):
        counter_increments([5, 3])
    assert unwrap_counter([]).tolist() == []


def test_power_series_of_a_counter_is_the_average_of_each_period() -> None:
    s = power_series(counter("cpu-package-0", [0, 0.1, 0.2], [0, 5, 15]))
    assert s["power_w"].tolist() == pytest.approx([50, 100])
    assert s["t_ns"].tolist() == [int(0.1 * S), int(0.2 * S)]


# --- per run and per phase ---------------------------------------------------------------------------------


def test_phases_get_their_joules_flops_and_tokens_per_joule() -> None:
    # 100 W flat from 0 to 1 s; two steps of forward (0.1 s) then backward (0.2 s)
    samples = power("gpu0", [i / 10 for i in range(11)], [100.0] * 11)
    steps = phases((0, "forward", 0.1, 0.2), (0, "backward", 0.2, 0.4), (1, "forward", 0.5, 0.6),
                   (1, "backward", 0.6, 0.8))  # fmt: skip
    table = energy_table(samples, steps, flops={"forward": 1e9, "backward": 2e9}, tokens_per_step=512)
    assert list(table.columns) == ENERGY_COLUMNS
    gpu = table[table["device"] == "gpu0"].set_index("scope")
    assert gpu.loc["forward", "joules"] == pytest.approx(20.0)  # 2 × 0.1 s × 100 W
    assert gpu.loc["backward", "joules"] == pytest.approx(40.0)
    assert gpu.loc["run", "joules"] == pytest.approx(70.0)  # the window 0.1–0.8 s, gaps included
    assert gpu.loc["run", "duration_ns"] == int(0.7 * S)
    assert gpu.loc["forward", "avg_w"] == pytest.approx(100.0)
    assert gpu.loc["forward", "flops"] == 2e9
    assert gpu.loc["forward", "flops_per_j"] == pytest.approx(2e9 / 20)
    assert gpu.loc["run", "flops"] == 6e9
    assert gpu.loc["run", "flops_per_j"] == pytest.approx(6e9 / 70)
    assert gpu.loc["backward", "tokens"] == 1024
    assert gpu.loc["backward", "tokens_per_j"] == pytest.approx(1024 / 40)
    assert (gpu["method"] == "power").all()


def test_a_phase_without_flops_gets_none_per_joule() -> None:
    samples = power("gpu0", [0, 1], [50, 50])
    table = energy_table(samples, phases((0, "optimizer", 0.2, 0.4)), flops={"forward": 1.0})
    row = table.set_index(["scope", "device"]).loc[("optimizer", "gpu0")]
    assert row["joules"] == pytest.approx(10.0)
    assert math.isnan(row["flops"]) and math.isnan(row["flops_per_j"]) and math.isnan(row["tokens_per_j"])


def test_peak_needs_a_sample_inside_and_the_total_sums_devices_per_tick() -> None:
    gpu = power("gpu0", [0, 0.05, 0.10, 0.15], [100, 300, 200, 100])
    cpu = power("cpu-package-0", [0.001, 0.051, 0.101, 0.151], [40, 20, 90, 40])
    samples = pd.concat([gpu, cpu])
    steps = phases((0, "forward", 0.04, 0.12), (0, "backward", 0.12, 0.14))
    table = energy_table(samples, steps).set_index(["scope", "device"])
    assert table.loc[("forward", "gpu0"), "peak_w"] == 300
    assert table.loc[("forward", "cpu-package-0"), "peak_w"] == 90
    assert table.loc[("forward", "total"), "peak_w"] == 320  # tick 1: 300 + 20 (not 300 + 90)
    assert table.loc[("forward", "total"), "samples"] == 2  # ticks 1 and 2
    # backward (20 ms) holds no sample: joules from interpolation, but no peak
    assert math.isnan(table.loc[("backward", "gpu0"), "peak_w"])
    # 0.12 s: 200 → 100 W over 0.10–0.15 s gives 160 W; 0.14 s gives 120 W
    assert table.loc[("backward", "gpu0"), "joules"] == pytest.approx(0.02 * (160 + 120) / 2)
    assert table.loc[("forward", "total"), "joules"] == pytest.approx(
        table.loc[("forward", "gpu0"), "joules"] + table.loc[("forward", "cpu-package-0"), "joules"]
    )
    assert table.loc[("forward", "total"), "method"] == "power"


def test_counter_devices_read_the_counter_at_phase_ends() -> None:
    # counter: 0 J at 0 s, 10 J at 1 s, 30 J at 2 s; a phase 0.5–1.5 s reads 5 J and 20 J
    samples = counter("cpu-package-0", [0, 1, 2], [0, 10, 30])
    row = energy_table(samples, phases((0, "forward", 0.5, 1.5))).set_index(["scope", "device"])
    assert row.loc[("forward", "cpu-package-0"), "joules"] == pytest.approx(15.0)
    assert row.loc[("forward", "cpu-package-0"), "method"] == "counter"
    # the only period ending inside the phase (0–1 s) averages 10 W, below the phase's own 15 W: no peak
    # is known (a 20-step run on an H200 showed a 117 W "peak" beside its 176 W average)
    assert row.loc[("forward", "cpu-package-0"), "avg_w"] == pytest.approx(15.0)
    assert math.isnan(row.loc[("forward", "cpu-package-0"), "peak_w"])
    # 0.9–2.1 s reads 9 → 31 J (18.3 W); the periods ending inside average 10 W and 20 W: the peak is 20 W
    samples = counter("cpu-package-0", [0, 1, 2, 3], [0, 10, 30, 40])
    row = energy_table(samples, phases((0, "forward", 0.9, 2.1))).set_index(["scope", "device"])
    assert row.loc[("forward", "cpu-package-0"), "avg_w"] == pytest.approx(22 / 1.2)
    assert row.loc[("forward", "cpu-package-0"), "peak_w"] == pytest.approx(20.0)


def test_a_device_without_energy_leaves_the_total_empty() -> None:
    samples = pd.concat([power("gpu0", [0, 1], [100, 100]), power("gpu1", [0, 1], [np.nan, np.nan])])
    table = energy_table(samples, phases((0, "forward", 0.2, 0.8))).set_index(["scope", "device"])
    assert table.loc[("forward", "gpu0"), "joules"] == pytest.approx(60.0)
    assert math.isnan(table.loc[("forward", "gpu1"), "joules"])
    assert math.isnan(table.loc[("forward", "total"), "joules"])
    assert math.isnan(table.loc[("forward", "total"), "peak_w"])


def test_windows_outside_the_samples_are_nan_not_extrapolated() -> None:
    samples = power("gpu0", [1, 2], [100, 100])
    table = energy_table(samples, phases((0, "forward", 0.5, 1.5))).set_index(["scope", "device"])
    assert math.isnan(table.loc[("forward", "gpu0"), "joules"])


def test_nothing_in_nothing_out() -> None:
    assert energy_table(power("gpu0", [], []), phases((0, "forward", 0, 1))).empty
    assert run_window(phases()) is None
    assert run_window(phases((0, "forward", 1, 2), (1, "forward", 3, 4))) == (1 * S, 4 * S)


# --- the dashboard figure: FLOPs per joule against batch size --------------------------------------------


def sweep_runs() -> pd.DataFrame:
    rows = [
        # run_id, model, batch, status, flops_per_j, tokens_per_j, avg_power_w
        ("r1", "tiny", 1, "ok", 2.0e9, 10.0, 150.0),
        ("r2", "tiny", 4, "ok", 6.0e9, 30.0, 250.0),
        ("r3", "tiny", 4, "ok", 7.0e9, 35.0, 260.0),  # newer run of the same point: it wins
        ("r4", "tiny", 16, "ok", 9.0e9, 45.0, 400.0),
        ("r5", "tiny", 64, "oom", np.nan, np.nan, np.nan),
        ("r6", "small", 4, "ok", np.nan, np.nan, np.nan),  # no --power: left out
    ]
    df = pd.DataFrame(
        rows,
        columns=["run_id", "model", "batch_size", "status", "flops_per_j", "tokens_per_j", "avg_power_w"],
    )
    return df.assign(mode="train", precision="bf16", compile=False, device="cuda", params=1, d_model=512)


def test_sweep_table_keeps_the_newest_run_per_batch_size() -> None:
    from analysis.dashboard.energy import energy_sweep_table

    table = energy_sweep_table(sweep_runs())
    assert table["run_id"].tolist() == ["r1", "r3", "r4"]
    assert table["batch_size"].tolist() == [1, 4, 16]
    assert set(table["setting"]) == {"bf16"}


def test_energy_figure_plots_gflops_per_joule_against_batch_size() -> None:
    from analysis.dashboard.energy import energy_figure, energy_sweep_table

    fig = energy_figure(energy_sweep_table(sweep_runs()))
    flops_trace = fig.data[0]
    assert flops_trace.name == "tiny · bf16 · cuda"
    assert list(flops_trace.x) == [1, 4, 16]
    assert list(flops_trace.y) == pytest.approx([2.0, 7.0, 9.0])  # GFLOP/J
    assert [t.yaxis for t in fig.data] == ["y", "y2", "y3"]
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == [1, 4, 16]


def test_energy_panel_says_what_is_missing() -> None:
    from analysis.dashboard.energy import energy_panel
    from analysis.dashboard.panel import DashboardData

    panel = energy_panel(DashboardData())
    assert panel.figure is None and "--power" in (panel.missing or "")
    drawn = energy_panel(DashboardData(runs=sweep_runs()))
    assert drawn.figure is not None and drawn.notes == []


def test_groups_sum_chosen_devices_and_run_summary_reads_one() -> None:
    gpu = power("gpu0", [0, 1], [300, 300])
    cpu = power("cpu-package-0", [0, 1], [50, 50])
    steps = phases((0, "forward", 0.1, 0.3), (0, "optimizer", 0.3, 0.5))
    groups = {"gpu": ["gpu0"], "total": ["gpu0", "cpu-package-0"]}
    table = energy_table(
        pd.concat([gpu, cpu]), steps, flops={"forward": 3e9}, tokens_per_step=100, groups=groups
    )
    run = table[table["scope"] == "run"].set_index("device")
    assert list(run.index) == ["cpu-package-0", "gpu0", "gpu", "total"]
    assert run.loc["gpu", "joules"] == pytest.approx(120.0)  # 300 W × 0.4 s
    assert run.loc["total", "joules"] == pytest.approx(140.0)
    assert run.loc["total", "flops"] == 3e9  # the optimizer has no FLOPs entry: the run sums forward's
    summary = run_summary(table, "gpu")
    assert summary == {
        "energy_j": pytest.approx(120.0),
        "avg_power_w": pytest.approx(300.0),
        "peak_power_w": None,  # no sample inside 0.1–0.5 s
        "flops_per_j": pytest.approx(3e9 / 120),
        "tokens_per_j": pytest.approx(100 / 120),
        "energy_method": "power",
    }
    assert all(type(v) in (float, str, type(None)) for v in summary.values())
    assert run_summary(table, "gpu7") == dict.fromkeys(RUN_ENERGY_FIELDS)
    assert (
        run_summary(energy_table(gpu, steps, groups={"pair": ["gpu0", "gpu1"]}), "pair")["energy_j"] is None
    )
