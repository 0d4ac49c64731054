"""Generate's serving figures beyond run and show: verdicts on TTFT and TPOT in `harness diff` of two
generate runs, the dashboard's serving panel across runs, and the runs table's columns of the modes listed."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from conftest import measure_drift
from typer.testing import CliRunner

from analysis.compare.diff import TPOT, TTFT, serving_verdicts
from analysis.dashboard.panel import DashboardData
from analysis.dashboard.phases import NO_TRAINING, phase_bars_panel
from analysis.dashboard.serving import serving_panel, serving_table
from harness.cli import app
from harness.core.records import ModelInfo, RunConfig, RunResult, StepRecord
from harness.execution.generate import EAGER, latency_stats, serving_figures
from harness.experiments.diff import tokens_frame
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()
PREFILL_NS, TOKEN_NS = 30_000_000, 4_000_000


KV_BYTES = 2 * 2 * 2 * 64 * 16 * 4  # keys and values × layers × batch × d_model × positions × fp32


def generate_run(
    run_id: str, *, token_scale: float = 1.0, steps: int = 8, seed: int = 0, busy: float | None = None
) -> RunResult:
    """A generate run of `steps` measured steps (2 warm-up), 8 new tokens each: 7 decoded tokens of about
    TOKEN_NS × token_scale, prefill about PREFILL_NS, 1% noise."""
    rng = np.random.default_rng(seed)
    config = RunConfig(model="tiny", mode="generate", warmup=2, steps=steps, new_tokens=8, batch_size=2)
    records = []
    for i in range(steps + 2):
        tokens = [int(TOKEN_NS * token_scale * (1 + 0.01 * rng.standard_normal())) for _ in range(7)]
        prefill = int(PREFILL_NS * (1 + 0.01 * rng.standard_normal()))
        records.append(
            StepRecord(i, i < 2, {"prefill": prefill, "decode": sum(tokens) + 1000}, tokens=tokens)
        )
    result = RunResult(
        run_id=run_id,
        config=config,
        status="ok",
        device="cpu",
        model=ModelInfo("transformer", 64, 256, 2, 2, 1000, 64, 100_000),
        steps=records,
    )
    figures = {"decode": EAGER, "kv_cache_bytes": KV_BYTES, "kv_cache_analytic_bytes": KV_BYTES}
    result.extra["serving"] = serving_figures(result, figures)
    if busy is not None:  # as a capture of the GPU adds it (harness.profilers)
        result.extra["serving"]["decode_gpu_busy"] = busy
    result.tokens_per_s = result.extra["serving"]["output_tokens_per_s"]
    return result


def steps_of(result: RunResult) -> pd.DataFrame:
    return pd.DataFrame(
        [(s.step, p, ns, s.warmup) for s in result.steps for p, ns in s.phases.items()],
        columns=["step", "phase", "duration_ns", "warmup"],
    )


def tokens_of(result: RunResult) -> pd.DataFrame:
    return pd.DataFrame(
        [(s.step, ns, s.warmup) for s in result.steps for ns in s.tokens],
        columns=["step", "duration_ns", "warmup"],
    )


def test_tpot_and_ttft_verdicts_over_the_decoded_tokens() -> None:
    a, b = generate_run("a", seed=1), generate_run("b", token_scale=1.10, seed=2)
    found = {v.phase: v for v in serving_verdicts(steps_of(a), steps_of(b), tokens_of(a), tokens_of(b))}
    assert list(found) == [TTFT, TPOT]
    tpot = found[TPOT].comparison
    assert found[TPOT].verdict == "regression" and 8 < tpot.effect_pct < 12 and tpot.ci_low_pct > 5
    assert (
        tpot.baseline_samples == tpot.treatment_samples == 8 * 7
    )  # every decoded token of the measured steps
    assert tpot.baseline_runs == 8  # the interval from the steps' token means
    measured = [ns for s in a.steps if not s.warmup for ns in s.tokens]
    assert tpot.baseline_mean == pytest.approx(np.mean(measured))
    assert tpot.baseline_mean == pytest.approx(a.extra["serving"]["tpot_ns"]["mean_ns"])
    ttft = found[TTFT].comparison
    assert found[TTFT].verdict == "inconclusive" or abs(ttft.effect_pct) < 2
    assert ttft.baseline_mean == pytest.approx(a.extra["serving"]["ttft_ns"]["mean_ns"])
    # a side that decoded no token after the first (--new-tokens 1): TTFT alone; a training run: nothing
    alone = serving_verdicts(steps_of(a), steps_of(b), tokens_of(a), tokens_of(b).iloc[0:0])
    assert [v.phase for v in alone] == [TTFT] and alone[0].comparison == ttft
    train = steps_of(a).assign(phase="forward")
    assert serving_verdicts(train, train, tokens_of(a).iloc[0:0], tokens_of(a).iloc[0:0]) == []


def test_diff_of_two_one_token_generate_runs_judges_their_ttft(tmp_db: str) -> None:
    """--new-tokens 1 (a TTFT benchmark): each step is its prefill and an empty decode, no token after the
    first. The diff's TTFT row is there (it was left out with TPOT's), and no TPOT row."""
    store = ResultsStore(tmp_db)
    for run_id, scale, seed in (("one-a", 1.0, 1), ("one-b", 1.3, 2)):
        result = generate_run(run_id, seed=seed)
        result.config.new_tokens = 1
        for s in result.steps:
            s.phases["prefill"] = int(s.phases["prefill"] * scale)
            s.phases["decode"], s.tokens = 20_000, []
        result.extra["serving"] = serving_figures(result, {"decode": EAGER})
        save_run(store, result)
    out = runner.invoke(app, ["diff", "one-a", "one-b", "--format", "json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    (key,) = (k for k in json.loads(out.stdout) if k.startswith("Phases: B against A"))
    rows = {r["Phase"]: r for r in json.loads(out.stdout)[key]}
    assert list(rows) == ["prefill", "decode", "overall (step)", "TTFT"]
    assert rows["TTFT"]["Mean A (ns)"] == rows["prefill"]["Mean A (ns)"]
    assert rows["TTFT"]["Δ (%)"] == pytest.approx(30, abs=2)
    assert "no TPOT: a side decoded no token after the first" in out.output


def test_diff_of_two_generate_runs_has_ttft_and_tpot_rows(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, generate_run("gen-a", seed=1))
    save_run(store, generate_run("gen-b", token_scale=1.25, seed=2))
    assert len(tokens_frame(store.get("gen-a"))) == 10 * 7  # warm-up steps' tokens are stored too
    out = runner.invoke(app, ["diff", "gen-a", "gen-b", "--format", "json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    (key,) = (k for k in json.loads(out.stdout) if k.startswith("Phases: B against A"))
    rows = {r["Phase"]: r for r in json.loads(out.stdout)[key]}
    assert list(rows) == ["prefill", "decode", "overall (step)", "TTFT", "TPOT"]
    # one run a side and no drift measured for the configuration: TTFT and TPOT are judged as the phases
    # are, no verdict (the steps' own scatter is not the drift between processes)
    assert {r["Verdict"] for r in rows.values()} == {"inconclusive"}
    assert rows["TPOT"]["Detail"] == rows["decode"]["Detail"] == "no drift measured"
    assert rows["TPOT"]["Steps A"] == 56
    assert rows["TTFT"]["Mean A (ns)"] == rows["prefill"]["Mean A (ns)"]
    measure_drift(store, generate_run("gen-aa", seed=5))  # runs made together: decode's drift ±0.5%
    out = runner.invoke(app, ["diff", "gen-a", "gen-b", "--format", "json"], catch_exceptions=False)
    rows = {r["Phase"]: r for r in json.loads(out.stdout)[key]}
    assert rows["TPOT"]["Verdict"] == "regression" and 20 < rows["TPOT"]["Δ (%)"] < 30
    assert rows["TTFT"]["Verdict"] != "regression"
    gated = runner.invoke(app, ["diff", "gen-a", "gen-b", "--gate", "10"], catch_exceptions=False)
    assert gated.exit_code != 0 and "TPOT" in gated.output


def test_the_serving_panel_draws_each_generate_run(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    for i, scale in enumerate((1.0, 0.5)):  # 15 steps of 7 tokens: enough for TPOT's p99, not TTFT's
        save_run(store, generate_run(f"tiny-2026010{i}-120000-ab1{i}", token_scale=scale, steps=15, seed=i))
    # without a capture of the GPU there is no busy share, and no subplot for it
    eager = serving_panel(DashboardData(runs=store.runs()))
    assert eager.figure is not None and "decode GPU busy (%)" not in {t.name for t in eager.figure.data}
    save_run(store, generate_run("tiny-20260103-120000-ab12", token_scale=0.25, steps=15, seed=2, busy=0.9))
    runs = store.runs()
    table = serving_table(runs)
    assert list(table["run_id"]) == list(runs["run_id"])
    assert table["label"].str.endswith(f" · {EAGER}").all()
    stored = runs.set_index("run_id")
    for column in ("ttft_p50_ns", "ttft_p99_ns", "tpot_p50_ns", "tpot_p90_ns", "tpot_p99_ns"):
        assert column in stored
    assert stored["kv_cache_bytes"].tolist() == stored["kv_cache_analytic_bytes"].tolist() == [KV_BYTES] * 3
    assert stored["decode_gpu_busy"].isna().tolist() == [True, True, False]
    assert table["tpot_p50_ns"].iloc[1] == pytest.approx(table["tpot_p50_ns"].iloc[0] / 2, rel=0.03)
    panel = serving_panel(DashboardData(runs=runs))
    assert panel.figure is not None
    drawn = {t.name: list(t.y) for t in panel.figure.data}
    assert list(drawn) == [
        "time to first token p50", "time to first token p99", "time per output token p50",
        "time per output token p90", "time per output token p99", "output tokens/s", "KV cache allocated",
        "KV cache analytic", "decode GPU busy (%)",
    ]  # fmt: skip
    assert drawn["time per output token p99"][0] == pytest.approx(table["tpot_p99_ns"].iloc[0] / 1e6)
    assert drawn["time per output token p90"][0] == pytest.approx(table["tpot_p90_ns"].iloc[0] / 1e6)
    assert drawn["KV cache allocated"] == pytest.approx([KV_BYTES / 2**20] * 3)
    assert drawn["decode GPU busy (%)"][2] == pytest.approx(90.0) and np.isnan(
        drawn["decode GPU busy (%)"][0]
    )
    assert drawn["output tokens/s"] == pytest.approx(list(table["tokens_per_s"]))
    # generate runs alone: the training panel says where they are drawn, not that there are no runs
    assert phase_bars_panel(DashboardData(runs=runs)).missing == NO_TRAINING


def test_the_serving_panel_counts_only_the_runs_it_draws_for_its_newest_note(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    for i in range(12):
        save_run(store, generate_run(f"tiny-20260101-1200{i:02}-ab{i:02}", steps=2, seed=i))
    failed = generate_run("tiny-20260101-130000-abff", steps=2)
    failed.status, failed.error, failed.steps, failed.extra = "error", "RuntimeError: boom", [], {}
    save_run(store, failed)
    runs = store.runs()
    assert (runs["mode"] == "generate").sum() == 13
    panel = serving_panel(DashboardData(runs=runs))
    assert len(serving_table(runs)) == 12
    assert not any(n.startswith("The newest") for n in panel.notes)  # all 12 it could draw are drawn
    save_run(store, generate_run("tiny-20260101-140000-ab99", steps=2))
    panel = serving_panel(DashboardData(runs=store.runs()))
    assert "The newest 12 generate runs; pick others with --runs or --last." in panel.notes


def test_runs_lists_the_phases_of_the_modes_listed(tmp_db: str) -> None:
    save_run(ResultsStore(tmp_db), generate_run("gen-a", seed=1))
    out = runner.invoke(app, ["runs", "--format", "json"], catch_exceptions=False)
    assert out.exit_code == 0
    out = runner.invoke(app, ["runs", "--wide"], catch_exceptions=False, env={"COLUMNS": "300"})
    header = out.output.splitlines()
    text = "\n".join(header)
    assert "prefill" in text and "decode" in text
    assert "forward" not in text and "backward" not in text and "optimizer" not in text


def test_runs_gives_generate_runs_new_tokens(tmp_db: str) -> None:
    """A generate run's --new-tokens is a column of `runs` in csv and json (empty for other modes), and of its
    table only when a run listed has it."""
    store = ResultsStore(tmp_db)
    save_run(store, RunResult("train-a", RunConfig(model="tiny"), "ok", device="cpu"))
    train_only = runner.invoke(app, ["runs", "--wide"], catch_exceptions=False, env={"COLUMNS": "300"})
    assert "new" not in train_only.output
    save_run(store, generate_run("gen-a", seed=1))
    shown = json.loads(runner.invoke(app, ["runs", "--format", "json"], catch_exceptions=False).stdout)
    assert [(r["run_id"], r["new_tokens"]) for r in shown] == [("train-a", None), ("gen-a", 8)]
    csv = runner.invoke(app, ["runs", "--format", "csv"], catch_exceptions=False).stdout.splitlines()
    header = csv[0].split(",")
    at = header.index("new_tokens")
    assert header[at - 1] == "context_length"
    assert [line.split(",")[at] for line in csv[1:]] == ["", "8"]
    table = runner.invoke(app, ["runs", "--wide"], catch_exceptions=False, env={"COLUMNS": "300"})
    assert "new" in table.output and "tokens" in table.output
    (gen_line,) = [line for line in table.output.splitlines() if "gen-a" in line]
    assert re.search(r"│ +8 │", gen_line)


def test_runs_csv_keeps_counts_whole_beside_a_run_without_them(tmp_db: str) -> None:
    """A run that failed before its model was built has no shape; the generate run beside it keeps its counts
    whole in csv (64, not 64.0) and json."""
    store = ResultsStore(tmp_db)
    save_run(store, RunResult("oom-a", RunConfig(model="tiny"), "oom", device="cpu"))
    save_run(store, generate_run("gen-a", seed=1))
    csv = runner.invoke(app, ["runs", "--format", "csv"], catch_exceptions=False).stdout.splitlines()
    header = csv[0].split(",")
    row = dict(zip(header, csv[2].split(","), strict=True))
    counts = ("params", "d_model", "d_ff", "num_layers", "num_heads")
    counts += ("kv_cache_bytes", "kv_cache_analytic_bytes")
    assert [row[c] for c in counts] == ["100000", "64", "256", "2", "2", str(KV_BYTES), str(KV_BYTES)]
    empty = dict(zip(header, csv[1].split(","), strict=True))
    assert [empty[c] for c in ("params", "d_model", "kv_cache_bytes")] == ["", "", ""]
    shown = json.loads(runner.invoke(app, ["runs", "--format", "json"], catch_exceptions=False).stdout)
    assert (shown[0]["d_model"], shown[1]["d_model"], shown[1]["kv_cache_bytes"]) == (None, 64, KV_BYTES)


def test_the_serving_panel_draws_a_one_token_generate_run(tmp_db: str) -> None:
    """--new-tokens 1 (a TTFT benchmark) has no TPOT; the panel draws its TTFT, tokens/s and KV cache beside
    a run that has TPOT, and on its own (it was left out, and alone it was "no generate runs")."""
    store = ResultsStore(tmp_db)
    one = generate_run("tiny-20260101-120000-one1", seed=1)
    one.config.new_tokens = 1
    for s in one.steps:
        s.phases["decode"], s.tokens = 20_000, []
    one.extra["serving"] = serving_figures(one, {"decode": EAGER, "kv_cache_bytes": KV_BYTES})
    one.tokens_per_s = one.extra["serving"]["output_tokens_per_s"]
    save_run(store, one)
    alone = serving_panel(DashboardData(runs=store.runs()))
    assert alone.figure is not None and alone.missing is None
    save_run(store, generate_run("tiny-20260102-120000-gen2", seed=2))
    table = serving_table(store.runs())
    assert list(table["run_id"]) == ["tiny-20260101-120000-one1", "tiny-20260102-120000-gen2"]
    ttft = one.extra["serving"]["ttft_ns"]
    assert table["ttft_p50_ns"].iloc[0] == ttft["p50_ns"] and np.isnan(table["tpot_p50_ns"].iloc[0])
    drawn = {t.name: list(t.y) for t in serving_panel(DashboardData(runs=store.runs())).figure.data}
    assert drawn["time to first token p50"][0] == pytest.approx(ttft["p50_ns"] / 1e6)
    assert drawn["output tokens/s"][0] == pytest.approx(2 * 1 / (ttft["mean_ns"] + 20_000) * 1e9)
    assert drawn["KV cache allocated"][0] == pytest.approx(KV_BYTES / 2**20)


def test_the_serving_panel_labels_a_one_token_run_as_decoding_nothing(tmp_db: str) -> None:
    """A run of --new-tokens 1 decoded no token: its label said `eager (growing KV cache)` (as a run stored
    with that path still has it); a run that decodes keeps its path."""
    from workloads.names import NO_DECODE

    store = ResultsStore(tmp_db)
    one = generate_run("tiny-20260101-120000-one1", seed=1)
    one.config.new_tokens = 1
    for s in one.steps:
        del s.phases["decode"]
        s.tokens = []
    one.extra["serving"] = serving_figures(one, {"decode": EAGER, "kv_cache_bytes": KV_BYTES})
    save_run(store, one)
    save_run(store, generate_run("tiny-20260102-120000-gen2", seed=2))
    table = serving_table(store.runs())
    assert list(table["decode_path"]) == [NO_DECODE, EAGER]
    labels = list(table["label"])
    assert labels[0].endswith(f" · {NO_DECODE}") and labels[1].endswith(f" · {EAGER}")


def test_a_degraded_capture_s_decode_gpu_busy_is_shown_untrusted(tmp_db: str) -> None:
    """decode's GPU-busy share is drawn from the capture, not the timers: of a run whose capture failed its
    health checks (`degraded`), `show` gave it as a plain figure beside the timers' sound ones."""
    store = ResultsStore(tmp_db)
    for run_id, status in (("gen-ok", "ok"), ("gen-bad", "degraded")):
        result = generate_run(run_id, busy=0.42)
        result.status = status
        save_run(store, result, profiler="nsys", nsys_mode="light")

    def busy_rows(run_id: str) -> list[tuple[str, float]]:
        shown = CliRunner().invoke(app, ["show", run_id, "--db", tmp_db, "--format", "json"])
        assert shown.exit_code == 0, shown.output
        rows = json.loads(shown.stdout)["serving (measured steps)"]
        return [(r["metric"], r["value"]) for r in rows if "GPU busy" in r["metric"]]

    assert busy_rows("gen-ok") == [("decode GPU busy (%)", 42.0)]
    assert busy_rows("gen-bad") == [
        ("decode GPU busy (%) (untrusted: the capture failed its health checks)", 42.0)
    ]


def test_a_percentile_is_given_only_of_enough_samples() -> None:
    # the p-th percentile needs 100 / (100 - p) samples for one to lie above it: of fewer it would be the
    # largest sample interpolated, said as if a tail were measured
    one, nine, ten = latency_stats([7]), latency_stats(list(range(1, 10))), latency_stats(list(range(1, 11)))
    assert one["p50_ns"] == 7.0 and one["p90_ns"] is None and one["p99_ns"] is None
    assert nine["p50_ns"] == 5.0 and nine["p90_ns"] is None
    assert ten["p90_ns"] == pytest.approx(9.1) and ten["p99_ns"] is None
    assert latency_stats(list(range(1, 100)))["p99_ns"] is None
    assert latency_stats(list(range(1, 101)))["p99_ns"] == pytest.approx(99.01)


def test_a_stored_percentile_of_too_few_samples_is_shown_blank_everywhere(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    result = generate_run("tiny-20260104-120000-ab13", steps=2)  # 2 measured steps, 14 tokens
    tokens = [ns for s in result.steps if not s.warmup for ns in s.tokens]
    serving = result.extra["serving"]
    assert serving["tpot_ns"]["p90_ns"] == pytest.approx(np.percentile(tokens, 90))
    # a summary holding a p99 of the 14 tokens and of the 2 steps (drawn, not measured)
    serving["tpot_ns"]["p99_ns"] = float(np.percentile(tokens, 99))
    serving["ttft_ns"]["p99_ns"] = float(np.percentile([s.phases["prefill"] for s in result.steps[2:]], 99))
    save_run(store, result)
    listed = json.loads(runner.invoke(app, ["runs", "--format", "json"], catch_exceptions=False).stdout)[0]
    assert listed["tpot_p99_ns"] is listed["ttft_p99_ns"] is None
    assert listed["tpot_p90_ns"] == pytest.approx(np.percentile(tokens, 90))
    out = runner.invoke(app, ["show", result.run_id, "--format", "json"], catch_exceptions=False)
    shown = {r["metric"]: r["value"] for r in json.loads(out.stdout)["serving (measured steps)"]}
    assert shown["TPOT p99 (ns)"] is shown["TTFT p99 (ns)"] is None
    assert shown["TPOT p90 (ns)"] == pytest.approx(np.percentile(tokens, 90))
    assert shown["percentiles left blank"] == (
        "TTFT p99 (2 measured steps), TPOT p99 (14 tokens): too few samples (needed: p90 10, p99 100)"
    )
    panel = serving_panel(DashboardData(runs=store.runs()))
    assert panel.figure is not None and "p90 needs 10, p99 needs 100" in panel.notes[0]
    drawn = {t.name: list(t.y) for t in panel.figure.data}
    assert np.isnan(drawn["time per output token p99"][0]) and np.isnan(drawn["time to first token p99"][0])
    assert drawn["time per output token p90"][0] == pytest.approx(np.percentile(tokens, 90) / 1e6)


def test_a_run_of_a_hundred_tokens_gives_their_p99(tmp_db: str) -> None:
    args = ["--device", "cpu", "--mode", "generate", "--steps", "2", "--warmup", "0", "--context-length", "8"]
    out = runner.invoke(app, ["run", "char", *args, "--new-tokens", "51", "--format", "json"])
    assert out.exit_code == 0, out.output
    shown = {r["metric"]: r["value"] for r in json.loads(out.stdout)["serving (measured steps)"]}
    (run_id,) = ResultsStore(tmp_db, readonly=True).runs()["run_id"]
    kept = ResultsStore(tmp_db, readonly=True).get(run_id).summary["token_timings"]
    tokens = [ns for t in kept for ns in t["durations_ns"]]
    assert len(tokens) == shown["TPOT tokens timed"] == 100
    assert shown["TPOT p99 (ns)"] == pytest.approx(np.percentile(tokens, 99))
    assert shown["TTFT p99 (ns)"] is None
    assert shown["percentiles left blank"].startswith("TTFT p99 (2 measured steps): too few samples")
    listed = json.loads(runner.invoke(app, ["runs", "--format", "json"], catch_exceptions=False).stdout)[0]
    assert listed["tpot_p99_ns"] == pytest.approx(np.percentile(tokens, 99)) and listed["ttft_p99_ns"] is None
