"""Overhead statistics: intervals, verdicts, and the overhead table, on step series with known properties."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from analysis.compare.overhead import (
    STEP_SUM,
    compare_samples,
    headline,
    mean_interval,
    overhead_table,
    overhead_verdict,
    short_verdict,
)
from harness.core.records import RunConfig
from harness.experiments.overhead import workload_of

PHASES = ["forward", "backward", "optimizer"]


def series(mean: float, sd: float, runs: int, steps: int, *, run_sd: float = 0.0, seed: int) -> pd.DataFrame:
    """Step times of `runs` runs: each run's level drawn around `mean` (run_sd), its steps around it (sd)."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(runs):
        level = mean + rng.normal(0, run_sd)
        rows += [(r, level + rng.normal(0, sd)) for _ in range(steps)]
    return pd.DataFrame(rows, columns=["run", "duration_ns"])


def test_known_effect_is_found_with_an_interval_around_it() -> None:
    base = series(100e6, 3e6, runs=3, steps=10, run_sd=1e6, seed=1)
    slow = series(110e6, 3e6, runs=3, steps=10, run_sd=1e6, seed=2)
    c = compare_samples(base, slow)
    assert c.outcome == "increase" and c.runs_seen
    assert c.ci_low_pct < 10 < c.ci_high_pct  # the true +10% is inside
    assert 0 < c.ci_low_pct < c.effect_pct < c.ci_high_pct
    assert c.effect_pct == pytest.approx((slow["duration_ns"].mean() / base["duration_ns"].mean() - 1) * 100)
    assert (c.baseline_samples, c.treatment_samples, c.baseline_runs, c.treatment_runs) == (30, 30, 3, 3)
    verdict = overhead_verdict(c, "nsys light")
    assert verdict == f"nsys light adds {c.effect_pct:.1f}% (CI {c.ci_low_pct:+.1f}…{c.ci_high_pct:+.1f}%)"


def test_noise_larger_than_the_effect_is_inconclusive() -> None:
    # +5% true effect under steps whose spread is about their mean, as on the busy 2-core machine
    base = series(380e6, 380e6, runs=2, steps=3, seed=3).assign(duration_ns=lambda d: d["duration_ns"].abs())
    slow = series(400e6, 380e6, runs=2, steps=3, seed=4).assign(duration_ns=lambda d: d["duration_ns"].abs())
    c = compare_samples(base, slow)
    assert c.outcome == "inconclusive"
    assert c.ci_low_pct < 0 < c.ci_high_pct and c.noise_pct > abs(c.effect_pct)
    text = overhead_verdict(c)
    assert text == f"inconclusive: the noise (±{c.noise_pct:.1f}%) is larger than the effect"
    assert "adds" not in text and str(round(c.effect_pct, 1)) not in text  # no bare figure
    assert short_verdict(c) == f"inconclusive (±{c.noise_pct:.0f}%)"


def test_run_to_run_drift_is_in_the_interval() -> None:
    # steps within a run agree closely; runs differ by ±10%: with runs, that drift must widen the interval
    base = series(100.0, 0.5, runs=4, steps=20, run_sd=10, seed=5)
    same = series(100.0, 0.5, runs=4, steps=20, run_sd=10, seed=6)
    pooled = compare_samples(base.drop(columns="run"), same.drop(columns="run"))
    by_run = compare_samples(base, same)
    assert by_run.noise_pct > 3 * pooled.noise_pct
    assert by_run.outcome == "inconclusive"
    assert not pooled.runs_seen and by_run.runs_seen


def test_faster_under_the_profiler_is_not_called_an_overhead() -> None:
    base = series(100.0, 1.0, runs=3, steps=10, seed=7)
    fast = series(80.0, 1.0, runs=3, steps=10, seed=8)
    c = compare_samples(base, fast)
    assert c.outcome == "decrease"
    text = overhead_verdict(c, "nsys light")
    assert text.startswith("faster under nsys light by ") and "not an overhead" in text


def test_too_few_steps_say_so() -> None:
    one = pd.DataFrame({"run": [0], "duration_ns": [100.0]})
    c = compare_samples(one, one.assign(duration_ns=120.0))
    assert c.outcome == "inconclusive" and math.isnan(c.ci_low_pct)
    assert c.effect_pct == pytest.approx(20.0)
    assert overhead_verdict(c).startswith("inconclusive: too few steps")


def test_mean_interval_uses_run_means() -> None:
    two_runs = pd.DataFrame({"run": [0, 0, 1, 1], "duration_ns": [9.0, 11.0, 19.0, 21.0]})
    mean, low, high = mean_interval(two_runs)
    # run means 10 and 20: standard error 5, Student's t with 1 degree of freedom (12.706)
    assert mean == 15.0
    assert (high - mean) == pytest.approx(12.7062047 * 5) and (mean - low) == pytest.approx(12.7062047 * 5)


def test_overhead_table_values() -> None:
    rows = []
    for label, scale in (("no nsys", 1.0), ("nsys light", 1.5)):
        for repeat in range(2):
            for step in range(3):
                rows.append((label, repeat, step, "forward", int(100 * scale) + step))
                rows.append((label, repeat, step, "backward", int(200 * scale)))
    df = pd.DataFrame(rows, columns=["label", "repeat", "step", "phase", "duration_ns"])
    table = overhead_table(df, PHASES)
    assert list(table["Phase"]) == ["forward", "backward", "optimizer", STEP_SUM]
    fwd = table.set_index("Phase").loc["forward"]
    assert fwd["no nsys Avg (ns)"] == pytest.approx(101.0)
    assert fwd["nsys light Avg (ns)"] == pytest.approx(151.0)
    assert fwd["nsys light overhead (%)"] == pytest.approx(50 / 101 * 100)
    assert fwd["nsys light CI low (%)"] == pytest.approx(50 / 101 * 100)  # both runs alike: no spread
    assert fwd["nsys light verdict"] == "nsys light adds 49.5% (CI +49.5…+49.5%)"
    assert fwd["no nsys StdDev (ns)"] == pytest.approx(pd.Series([100, 101, 102] * 2).std())
    step = table.set_index("Phase").loc[STEP_SUM]
    assert step["no nsys Avg (ns)"] == pytest.approx(301.0)
    optimizer = table.set_index("Phase").loc["optimizer"]  # no samples: every figure empty, none 0.0
    for label in ("no nsys", "nsys light"):
        assert pd.isna(optimizer[f"{label} Avg (ns)"]) and pd.isna(optimizer[f"{label} StdDev (ns)"])
    one = overhead_table(df[(df["repeat"] == 0) & (df["step"] == 0)], PHASES).set_index("Phase")
    assert one.loc["forward", "no nsys StdDev (ns)"] == 0.0  # one sample: 0.0, as nsys prints one instance's


def test_overhead_table_leaves_an_inconclusive_overhead_empty() -> None:
    base = series(100.0, 60.0, runs=2, steps=3, seed=9).assign(label="no nsys")
    prof = series(90.0, 60.0, runs=2, steps=3, seed=10).assign(label="nsys light")
    steps = pd.concat([base, prof]).rename(columns={"run": "repeat"}).assign(phase="forward", step=0)
    row = overhead_table(steps, ["forward"]).iloc[0]
    assert pd.isna(row["nsys light overhead (%)"])  # never a bare (here negative) figure as an overhead
    assert row["nsys light CI low (%)"] < 0 < row["nsys light CI high (%)"]
    assert row["nsys light verdict"].startswith("inconclusive")
    assert list(headline(steps, ["forward"])) == ["nsys light"]  # one phase: that phase is the headline


def test_the_verdict_words_are_written_once() -> None:
    """Every wording of an overhead verdict (a sentence, a bar's label, the figures) is in one table of
    analysis/compare/overhead.py: no other module writes an outcome's words, with their interval, again."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    writing = sorted(
        str(p.relative_to(repo))
        for pkg in ("analysis", "harness")
        for p in (repo / pkg).rglob("*.py")
        if "{low:" in p.read_text()  # a verdict's format: the interval's low end
    )
    assert writing == ["analysis/compare/overhead.py"]


def test_the_title_names_the_decode_path() -> None:
    """Eager and CUDA-graph decode measured one after the other are told apart by their tables' titles."""
    generate = RunConfig(model="small", mode="generate", device="cuda")
    assert workload_of(generate) == "small generate"
    assert workload_of(replace(generate, cuda_graphs=True)) == "small generate (CUDA-graph decode)"
    assert workload_of(replace(generate, compile=True)) == "small generate (torch.compile)"


def _two_modes_measured(monkeypatch: pytest.MonkeyPatch, nsys_bin: str) -> list[pd.DataFrame]:
    """`harness overhead` measuring nothing: its result, of `--nsys-mode light,full`, made of known steps
    (light: its two runs 20% apart, inconclusive; full: 1.5 times the baseline, its runs 1% apart). The
    list the table it prints is put in."""
    from harness.core.records import RunResult, StepRecord
    from harness.experiments import overhead

    made: list[pd.DataFrame] = []

    def measure(config, profiler, options, **_):  # type: ignore[no-untyped-def]
        runs = []
        scales = [("no nsys", 1.0), ("nsys light", 0.9), ("nsys full", 1.5)]
        scales += [("no nsys", 1.01), ("nsys light", 1.1), ("nsys full", 1.515)]
        for i, (label, scale) in enumerate(scales):
            steps = [StepRecord(s, False, {p: int(1e8 * scale) + s for p in PHASES}) for s in range(4)]
            result = RunResult(f"r{i}", config, "ok", device="cpu", device_name="cpu", steps=steps)
            runs.append((label, i // 3, result))
        steps = overhead.step_table(runs)
        found = headline(steps, PHASES, "no nsys")
        made.append(overhead_table(steps, PHASES, "no nsys"))
        return overhead.OverheadResult("overhead-x", runs, made[-1], [], None, found, "nsys")

    monkeypatch.setattr(overhead, "measure_overhead", measure)
    monkeypatch.setenv("HARNESS_NSYS", nsys_bin)  # the command checks nsys before it measures
    return made


def _overhead_cli(tmp_db: str, columns: int) -> str:
    from typer.testing import CliRunner

    from harness.cli import app

    args = ["overhead", "char", "--device", "cpu", "--nsys-mode", "light,full", "--db", tmp_db]
    r = CliRunner().invoke(app, args, env={"COLUMNS": str(columns)})
    assert r.exit_code == 0, r.output
    return r.stdout


def test_each_modes_whole_step_verdict_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_db: str, nsys_bin: str
) -> None:
    """`overhead --nsys-mode light,full`: the whole-step notes were `whole steps: inconclusive: …` and
    `whole steps: nsys full adds …`, the first naming no mode. Each line says whose it is."""
    _two_modes_measured(monkeypatch, nsys_bin)
    said = [line for line in _overhead_cli(tmp_db, 200).splitlines() if line.startswith("note: whole steps")]
    assert said == [
        "note: whole steps, nsys light: inconclusive: the noise (±160.8%) is larger than the effect",
        "note: whole steps: nsys full adds 50.0% (CI +45.5…+54.6%)",
    ], said


def test_both_modes_fit_60_columns_with_every_figure_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_db: str, nsys_bin: str
) -> None:
    """`overhead --nsys-mode light,full` on a 60-column terminal drew its table 66 cells wide: the header
    word `overhead` held two columns of `50.0` at 8 cells. Its header words are abbreviated now (a note
    says so), and each phase's row holds the baseline's time, both modes' times and their overheads."""
    from rich.cells import cell_len

    made = _two_modes_measured(monkeypatch, nsys_bin)
    out = _overhead_cli(tmp_db, 60)
    assert max(cell_len(line) for line in out.splitlines()) <= 60, out
    assert "note: headers abbreviated to fit: ovhd = overhead" in out
    (table,) = made
    cells = [[c.strip() for c in line.split("│")] for line in out.splitlines() if "│" in line]
    rows = {r[0]: r for r in cells}

    def ms(v: float) -> str:
        return f"{v / 1e6:,.3f}"

    for row in table.to_dict("records"):
        shown = rows[row["Phase"]]
        light, full = row["nsys light overhead (%)"], row["nsys full overhead (%)"]
        assert shown == [
            row["Phase"], ms(row["no nsys Avg (ns)"]), ms(row["nsys light Avg (ns)"]),
            "—" if math.isnan(light) else f"{light:.1f}", ms(row["nsys full Avg (ns)"]), f"{full:.1f}",
        ], out  # fmt: skip
