"""Generate's serving figures people compare across runs (TTFT and TPOT means, decode tokens/s) as columns:
of a generate sweep's table in every format, and of `harness runs` (csv and json always, the table only
when a run listed has them), read from what the run stored, equal to what `show` prints."""

from __future__ import annotations

import json
import math
import re

import pytest
from test_serving_views import generate_run
from typer.testing import CliRunner

from harness.cli import app
from harness.core.records import RunConfig, RunResult
from harness.experiments.run_tables import SERVING_MEANS, results_table
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()
WIDE = {"COLUMNS": "400"}


def test_results_table_gives_a_generate_runs_serving_means() -> None:
    run = generate_run("gen-a", seed=1)
    measured = [s for s in run.steps if not s.warmup]
    ttft = sum(s.phases["prefill"] for s in measured) / len(measured)
    tokens = [ns for s in measured for ns in s.tokens]
    tpot = sum(tokens) / len(tokens)
    (row,) = results_table([run], serving=True).to_dict("records")
    assert row["TTFT mean (ns)"] == pytest.approx(ttft)
    assert row["TTFT mean (ns)"] == pytest.approx(row["prefill mean (ns)"])
    assert row["TPOT mean (ns)"] == pytest.approx(tpot)
    assert row["decode tokens/s"] == pytest.approx(2 / (tpot / 1e9))  # batch 2 over the TPOT mean
    # a run's own table is unchanged: its serving table says them
    assert not set(SERVING_MEANS) & set(results_table([run]).columns)


def test_a_train_sweeps_table_has_no_serving_columns() -> None:
    runs = [RunResult(f"train-{i}", RunConfig(model="tiny"), "ok", device="cpu") for i in range(2)]
    assert list(results_table(runs, serving=True).columns) == list(results_table(runs).columns)
    assert not set(SERVING_MEANS) & set(results_table(runs, serving=True).columns)


def test_a_one_token_generate_run_has_ttft_and_no_tpot() -> None:
    run = generate_run("gen-one", seed=2)
    run.extra["serving"]["tpot_ns"], run.extra["serving"]["decode_tokens_per_s"] = None, None
    (row,) = results_table([run], serving=True).to_dict("records")
    assert row["TTFT mean (ns)"] == run.extra["serving"]["ttft_ns"]["mean_ns"]
    assert math.isnan(row["TPOT mean (ns)"]) and math.isnan(row["decode tokens/s"])


def test_runs_lists_a_generate_runs_serving_figures(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, RunResult("train-a", RunConfig(model="tiny"), "ok", device="cpu"))
    train_only = runner.invoke(app, ["runs", "--wide"], catch_exceptions=False, env=WIDE)
    assert "TTFT" not in train_only.output and "TPOT" not in train_only.output
    gen = generate_run("gen-a", seed=1)
    save_run(store, gen)
    serving = gen.extra["serving"]
    shown = json.loads(runner.invoke(app, ["runs", "--format", "json"], catch_exceptions=False).stdout)
    assert [r["decode_tokens_per_s"] for r in shown] == [None, serving["decode_tokens_per_s"]]
    assert [r["ttft_mean_ns"] for r in shown] == [None, serving["ttft_ns"]["mean_ns"]]
    assert shown[1]["tpot_mean_ns"] == serving["tpot_ns"]["mean_ns"]
    csv = runner.invoke(app, ["runs", "--format", "csv"], catch_exceptions=False).stdout.splitlines()
    header = csv[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=True)) for line in csv[1:]]
    assert [r["decode_tokens_per_s"] for r in rows] == ["", repr(serving["decode_tokens_per_s"])]
    assert float(rows[1]["ttft_mean_ns"]) == serving["ttft_ns"]["mean_ns"]
    table = runner.invoke(app, ["runs", "--wide"], catch_exceptions=False, env=WIDE).output
    assert "TTFT" in table and "TPOT" in table and "decode" in table
    (gen_line,) = [line for line in table.splitlines() if "gen-a" in line]
    assert f"{serving['ttft_ns']['mean_ns'] / 1e6:,.3f}" in gen_line
    assert f"{serving['tpot_ns']['mean_ns'] / 1e6:,.3f}" in gen_line
    assert re.search(rf"│ +{serving['decode_tokens_per_s']:,.3f} │", gen_line)


@pytest.mark.slow
def test_a_cpu_generate_runs_serving_figures_in_runs_and_sweep(tmp_db: str) -> None:
    """A real generate run on the CPU: `runs` gives TTFT as the prefill mean and TPOT as the mean of the
    decoded tokens' own times, as stored (each step's tokens inside its decode phase); a generate sweep's
    table, csv and json give them too. Nothing is asserted of how close the tokens come to filling decode:
    the loop's time between them grows with the machine's load."""
    gen = ["--mode", "generate", "--device", "cpu", "-b", "1", "--new-tokens", "4", "--steps", "2"]
    gen += ["--warmup", "1"]
    assert runner.invoke(app, ["run", "tiny", *gen], catch_exceptions=False).exit_code == 0
    (run,) = json.loads(runner.invoke(app, ["runs", "--format", "json"], catch_exceptions=False).stdout)
    assert run["ttft_mean_ns"] == pytest.approx(run["prefill_mean_ns"])
    stored_run = ResultsStore(tmp_db).get(run["run_id"])
    measured = [t for t in stored_run.summary["token_timings"] if not t["warmup"]]
    tokens = [ns for t in measured for ns in t["durations_ns"]]
    assert len(tokens) == 2 * 3  # 2 measured steps, 3 decoded tokens each (the first is prefill's)
    assert run["tpot_mean_ns"] == pytest.approx(sum(tokens) / len(tokens))
    decode = {t.step: t.duration_ns for t in stored_run.step_timings if t.phase == "decode"}
    assert all(sum(t["durations_ns"]) <= decode[t["step"]] for t in measured)
    assert run["decode_tokens_per_s"] == pytest.approx(1 / (run["tpot_mean_ns"] / 1e9))
    out = runner.invoke(app, ["sweep", "--models", "tiny", *gen, "-f", "json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    (point,) = json.loads(out.stdout)
    assert point["TTFT mean (ns)"] == pytest.approx(point["prefill mean (ns)"])
    assert 0 < point["TPOT mean (ns)"] * 3 <= point["decode mean (ns)"]  # its tokens inside each decode
    assert point["decode tokens/s"] == pytest.approx(1 / (point["TPOT mean (ns)"] / 1e9))
    stored = json.loads(runner.invoke(app, ["runs", "--format", "json"], catch_exceptions=False).stdout)[-1]
    assert point["TTFT mean (ns)"] == stored["ttft_mean_ns"]
    assert point["decode tokens/s"] == stored["decode_tokens_per_s"]
