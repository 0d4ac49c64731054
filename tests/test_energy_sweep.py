"""FLOPs per watt against batch size: `harness sweep --batch-sizes … --power` and the dashboard panel.

The panel is fed from a real results store whose runs carry energy figures set directly (this machine has
no power source to measure them); the sweep runs for real on the CPU, where `--power` finds none.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from analysis.dashboard import DashboardData, collect
from analysis.dashboard.energy import energy_panel
from harness.cli import app
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore
from tests.dashboard_data import result

NO_SOURCE = ["NVML: not asked: the run is on the CPU, not a GPU", "RAPL: /sys/class/powercap not present"]


def energy_run(run_id: str, batch: int, precision: str, flops_per_j: float | None, device: str = "cuda"):
    """A successful run made with --power: energy figures where `flops_per_j` is given, else none."""
    r = result(run_id, "tiny", precision, [(1_000_000, 2_000_000, 500_000)])
    r.config.batch_size, r.device = batch, device
    summary = {"energy_j": None, "avg_power_w": None, "flops_per_j": None, "tokens_per_j": None}
    if flops_per_j is not None:
        summary = {
            "energy_j": 1e12 / flops_per_j,
            "avg_power_w": 100.0 + batch,
            "peak_power_w": 120.0 + batch,
            "flops_per_j": flops_per_j,
            "tokens_per_j": flops_per_j / 1e8,
            "energy_method": "counter",
        }
    r.extra = {"power_notes": [] if flops_per_j is not None else NO_SOURCE, "energy_summary": summary}
    return r


def panel_of(store: ResultsStore):
    return energy_panel(collect(store))


def test_panel_draws_flops_per_joule_against_batch_size_per_model_precision_device(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    for batch, fpj in [(1, 2e9), (2, 3.5e9), (4, 5e9), (8, 4.5e9)]:
        save_run(store, energy_run(f"tiny-bf16-b{batch}", batch, "bf16", fpj), experiment="sweep-a")
    for batch, fpj in [(1, 1e9), (4, 2e9)]:
        save_run(store, energy_run(f"tiny-fp32-b{batch}", batch, "fp32", fpj), experiment="sweep-b")
    save_run(store, energy_run("tiny-fp32-cpu-b2", 2, "fp32", 0.25e9, device="cpu"), experiment="sweep-c")

    panel = panel_of(ResultsStore(tmp_db, readonly=True))
    assert panel.missing is None and panel.notes == []
    flops = {t.name: t for t in panel.figure.data if t.yaxis == "y"}  # the first subplot: GFLOP/J
    assert set(flops) == {"tiny · fp32 · cpu", "tiny · fp32 · cuda", "tiny · bf16 · cuda"}
    assert list(flops["tiny · bf16 · cuda"].x) == [1, 2, 4, 8]
    assert list(flops["tiny · bf16 · cuda"].y) == pytest.approx([2.0, 3.5, 5.0, 4.5])
    assert list(flops["tiny · fp32 · cuda"].x) == [1, 4]
    assert list(flops["tiny · fp32 · cuda"].y) == pytest.approx([1.0, 2.0])
    assert list(flops["tiny · fp32 · cpu"].y) == pytest.approx([0.25])
    assert flops["tiny · bf16 · cuda"].customdata[0][2] == "sweep-a"  # the experiment, in the hover
    watts = [t for t in panel.figure.data if t.yaxis == "y3" and t.name == "tiny · bf16 · cuda"]
    assert list(watts[0].y) == pytest.approx([101.0, 102.0, 104.0, 108.0])


def test_panel_without_a_power_source_says_so_and_draws_nothing(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    for batch in (1, 2):
        save_run(store, energy_run(f"tiny-b{batch}", batch, "fp32", None, device="cpu"), experiment="sweep-x")
    panel = panel_of(store)
    assert panel.figure is None
    assert panel.missing is not None
    assert panel.missing.startswith("no energy was measured: 2 run(s) asked for it with --power")
    assert "RAPL: /sys/class/powercap not present" in panel.missing


def test_panel_draws_only_what_was_measured_and_notes_the_rest(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, energy_run("tiny-b1", 1, "bf16", 2e9))
    save_run(store, energy_run("tiny-b2", 2, "bf16", 3e9))
    save_run(store, energy_run("tiny-cpu-b4", 4, "fp32", None, device="cpu"))
    save_run(
        store, result("tiny-nopower", "tiny", "fp32", [(1, 2, 3)])
    )  # no --power: neither drawn nor noted
    panel = panel_of(store)
    (flops,) = [t for t in panel.figure.data if t.yaxis == "y"]
    assert list(flops.x) == [1, 2] and list(flops.y) == pytest.approx([2.0, 3.0])
    assert panel.notes == [
        "1 run(s) with --power measured no energy and are not drawn: " + "; ".join(NO_SOURCE) + "."
    ]


def test_panel_of_an_empty_store_says_how_to_get_the_curve() -> None:
    panel = energy_panel(DashboardData())
    assert panel.figure is None and "--batch-sizes 1,2,4,8 --power" in (panel.missing or "")


def test_sweep_batch_sizes_must_be_positive_integers(tmp_db: str) -> None:
    out = CliRunner().invoke(app, ["sweep", "--models", "tiny", "--device", "cpu", "--batch-sizes", "1,x,0"])
    assert out.exit_code == 2
    assert "--batch-sizes takes positive integers, e.g. 1,2,4,8; got x, 0" in out.output


@pytest.mark.slow
@pytest.mark.elsewhere
def test_sweep_over_batch_sizes_stores_one_experiment(tmp_db: str) -> None:
    args = ["sweep", "--models", "tiny", "--device", "cpu", "--batch-sizes", "1,2", "--steps", "1"]
    out = CliRunner().invoke(app, [*args, "--warmup", "0", "--power", "--wide"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    runs = ResultsStore(tmp_db, readonly=True).runs()
    assert len(runs) == 2
    (experiment,) = set(runs["experiment"])
    assert experiment.startswith("sweep-")
    assert list(runs["batch_size"]) == [1, 2]
    assert (runs["status"] == "ok").all() and runs["energy_j"].isna().all()  # nothing made up
    for line in NO_SOURCE:
        assert out.output.count(line) == 1  # said once for the sweep, not once per point
    assert "batch" in out.output
    panel = panel_of(ResultsStore(tmp_db, readonly=True))
    assert panel.figure is None and "no energy was measured: 2 run(s)" in (panel.missing or "")
