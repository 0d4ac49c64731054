"""`harness roofline RUN`: a stored run's configuration and measured times on the roofline, MFU; the
dashboard's roofline and per-block panels."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import workloads
from analysis.dashboard import collect
from analysis.dashboard.blocks import block_shares, blocks_panel
from analysis.dashboard.roofline import roofline_panel
from analysis.views.blocks import OUTSIDE
from harness.cli import app
from harness.core.records import BlockRecord, ModelInfo, RunConfig, RunResult, StepRecord
from harness.experiments.roofline import dashboard_roofline, run_report
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore
from workloads.roofline import subblock_costs

runner = CliRunner()
H100_FP32 = 67e12  # workloads.peak: H100 SXM, fp32


def _run(run_id: str, model: str, *, blocks: bool = True, mode: str = "train", device: str = "cpu",
         name: str = "AMD EPYC") -> RunResult:  # fmt: skip
    """Two measured steps of `model` (batch 2, context 16) with known phase and block times (ns)."""
    spec = workloads.get_spec(model)
    config = RunConfig(model=model, mode=mode, device=device, batch_size=2, context_length=16, warmup=1,
                       steps=2, attention="math", nvtx_detail=blocks)  # fmt: skip
    phases = {"forward": 4_000_000, "backward": 8_000_000, "optimizer": 2_000_000}
    if mode == "forward":
        phases = {"forward": 4_000_000}
    steps = [StepRecord(i, i == 0, dict(phases)) for i in range(3)]
    records = []
    if blocks:
        for step in (1, 2):
            for layer in range(spec.num_layers):
                records += [BlockRecord(step, layer, "qkv_proj", "forward", 100_000),
                            BlockRecord(step, layer, "mlp_up", "forward", 200_000),
                            BlockRecord(step, layer, "mlp_up", "backward", 400_000),
                            BlockRecord(step, layer, "mlp", "forward", 500_000)]  # fmt: skip
            records.append(BlockRecord(step, None, "lm_head", "forward", 300_000))
    info = ModelInfo(spec.family, spec.d_model, spec.d_ff, spec.num_layers, spec.num_heads, spec.vocab_size,
                     16, 1)  # fmt: skip
    return RunResult(run_id=run_id, config=config, status="ok", device=device, device_name=name, model=info,
                     steps=steps, blocks=records)  # fmt: skip


def test_run_report_places_the_runs_block_times(tmp_db) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, _run("tiny-r1", "tiny", device="cuda", name="NVIDIA H100 80GB HBM3"))
    report = run_report(store, "tiny-r1")
    config = (report.batch_size, report.context_length, report.precision, report.attention)
    assert config == (2, 16, "fp32", "math")
    assert report.source == "timers" and report.used is not None and report.used.peak_flops == H100_FP32
    costs = subblock_costs(workloads.get_spec("tiny").with_overrides(context_length=16), 2, 16, "fp32")
    table = report.table.set_index(["sub-block", "pass"])
    # qkv_proj: 100 µs per layer, 4 layers, per step
    assert table.loc[("qkv_proj", "forward"), "time (ns)"] == 400_000
    flops = costs.set_index(["sub-block", "pass"]).loc[("qkv_proj", "forward"), "flops"]
    assert table.loc[("qkv_proj", "forward"), "achieved TFLOP/s"] == pytest.approx(flops / 400e-6 / 1e12)
    assert table.loc[("mlp_up", "backward"), "time (ns)"] == 1_600_000
    assert table.loc[("lm_head", "forward"), "time (ns)"] == 300_000
    assert table.loc[("optimizer", "optimizer"), "time (ns)"] == 2_000_000  # the optimizer phase
    assert np.isnan(table.loc[("rope", "forward"), "time (ns)"])  # nothing timed it
    assert table.loc[("qkv_proj", "forward"), "bound"] in ("memory", "compute")
    achieved = table.loc[("qkv_proj", "forward"), "achieved TFLOP/s"]
    attainable = table.loc[("qkv_proj", "forward"), "attainable TFLOP/s"]
    assert table.loc[("qkv_proj", "forward"), "of roof (%)"] == pytest.approx(achieved / attainable * 100)
    mfu = report.mfu_frame().set_index("phase")
    assert list(mfu.index) == ["forward", "backward", "optimizer", "step"]
    assert mfu.loc["forward", "time (ns)"] == 4_000_000
    assert mfu.loc["forward", "MFU (%)"] == pytest.approx(
        mfu.loc["forward", "flops"] / 4e-3 / H100_FP32 * 100
    )
    assert mfu.loc["step", "time (ns)"] == 14_000_000
    phases = report.phases_frame().set_index("phase")
    assert phases.loc["backward", "time (ns)"] == 8_000_000
    assert phases.loc["backward", "achieved GB/s"] == pytest.approx(
        phases.loc["backward", "bytes"] / 8e-3 / 1e9
    )


def test_run_without_blocks_has_phase_times_only(tmp_db) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, _run("char-plain", "char", blocks=False))
    report = run_report(store, "latest", gpu="A100")
    assert report.source is None and report.table["time (ns)"].isna().all()
    assert report.phases_frame()["time (ns)"].tolist() == [4_000_000, 8_000_000, 2_000_000]
    assert any("no per-block times" in n for n in report.notes)


def test_roofline_command_with_a_run(tmp_db) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, _run("char-r1", "char"))
    save_run(store, _run("char-gen", "char", mode="forward"))
    result = runner.invoke(app, ["roofline", "char-r1", "--gpu", "H100", "--format", "json"])
    assert result.exit_code == 0, result.output
    tables = json.loads(result.stdout)
    title = next(k for k in tables if k.startswith("sub-blocks"))
    assert "run char-r1: char train, batch 2 × context 16, fp32, math attention" in title
    rows = {(r["sub-block"], r["pass"]): r for r in tables[title]}
    assert rows[("qkv_proj", "forward")]["time (ns)"] == 400_000
    phases = [r["phase"] for r in tables["MFU (model FLOPs / time / peak)"]]
    assert phases == ["forward", "backward", "optimizer", "step"]
    people = runner.invoke(app, ["roofline", "char-gen"])  # a CPU run: no roofs without --measure
    assert people.exit_code == 0 and "achieved" in people.stdout and "pass --measure" in people.stdout


def test_roofline_of_a_generate_run_places_prefill_and_decode(tmp_db) -> None:
    """A generate run's roofline is of its own phases: the prompt's prefill and the decoded tokens."""
    store = ResultsStore(tmp_db)
    gen = _run("char-g", "char", blocks=False)
    gen.config.mode, gen.config.new_tokens = "generate", 5
    gen.steps = [StepRecord(i, i == 0, {"prefill": 3_000_000, "decode": 6_000_000}) for i in range(3)]
    gen.blocks = [BlockRecord(step, layer, "qkv_proj", phase, ns) for step in (1, 2) for layer in range(4)
                  for phase, ns in (("prefill", 100_000), ("decode", 50_000))]  # fmt: skip
    save_run(store, gen)
    result = runner.invoke(app, ["roofline", "char-g", "--gpu", "H100", "--format", "json"])
    assert result.exit_code == 0, result.output
    tables = json.loads(result.stdout)
    title = next(k for k in tables if k.startswith("sub-blocks"))
    assert "char generate, batch 2 × prompt 16 + 5 tokens" in title
    assert {r["pass"] for r in tables[title]} == {"prefill", "decode"}
    rows = {(r["sub-block"], r["pass"]): r for r in tables[title]}
    assert rows[("qkv_proj", "decode")]["time (ns)"] == 200_000  # 4 layers × 50 µs per step
    spec = workloads.get_spec("char")
    # each of the 4 decoded tokens (the 5th is prefill's) through qkv_proj: 2 · batch · d · 3d, every layer
    assert rows[("qkv_proj", "decode")]["flops"] == 4 * 2 * 2 * spec.d_model * 3 * spec.d_model * 4
    phases = [r["phase"] for r in tables["MFU (model FLOPs / time / peak)"]]
    assert phases == ["prefill", "decode", "step"]


def test_roofline_title_of_a_generate_run_of_one_new_token(tmp_db) -> None:
    """One new token is prefill's alone: the title counts it as one token."""
    store = ResultsStore(tmp_db)
    gen = _run("char-g1", "char", blocks=False)
    gen.config.mode, gen.config.new_tokens = "generate", 1
    gen.steps = [StepRecord(i, i == 0, {"prefill": 3_000_000, "decode": 1_000}) for i in range(3)]
    save_run(store, gen)
    assert "char generate, batch 2 × prompt 16 + 1 token, fp32" in run_report(store, "char-g1").title


def test_measure_of_a_run_on_a_device_this_machine_lacks_is_one_line(tmp_db, monkeypatch) -> None:
    """--measure of a CUDA run where there is no CUDA: one line about --measure and the run's device, not
    resolve_device's, which names --device (refused with a RUN)."""
    import torch

    save_run(ResultsStore(tmp_db), _run("char-gpu", "char", device="cuda", name="NVIDIA H100 80GB HBM3"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = runner.invoke(app, ["roofline", "char-gpu", "--measure"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: run char-gpu ran on cuda: --measure measures this machine's cuda")
    assert "--device" not in result.output and result.output.count("\n") == 1


def test_html_never_replaces_the_runs_trace(tmp_db, tmp_path) -> None:
    """--html naming the run's own trace (its measurement) is refused in one line, the trace left whole."""
    trace = tmp_path / "run.pt.trace.json"
    trace.write_text("{}")
    save_run(ResultsStore(tmp_db), _run("char-t", "char"), profiler="torch", artifacts={"trace": str(trace)})
    result = runner.invoke(app, ["roofline", "char-t", "--gpu", "H100", "--html", str(trace)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: --html {trace} is a file this command reads")
    assert trace.read_text() == "{}"


def test_dashboard_panels_for_block_runs(tmp_db) -> None:
    store = ResultsStore(tmp_db)
    empty = collect(store)
    assert blocks_panel(empty).missing and roofline_panel(empty).missing
    save_run(store, _run("tiny-d1", "tiny"))
    save_run(store, _run("char-d1", "char"))
    save_run(store, _run("char-plain", "char", blocks=False, mode="forward"))
    data = collect(store)
    shares = block_shares(data)
    assert list(dict.fromkeys(shares["label"])) == ["char", "tiny"]  # smallest model first
    top = shares[shares["view"] == "top"].groupby("label")["Step (%)"].sum()
    assert top.tolist() == pytest.approx([100.0, 100.0])
    tiny = shares[(shares["label"] == "tiny") & (shares["view"] == "top")].set_index("block")["Step (%)"]
    assert tiny["mlp"] == pytest.approx(4 * 500_000 / 14_000_000 * 100)
    assert tiny[OUTSIDE] == pytest.approx(100 - tiny.drop(OUTSIDE).sum())
    panel = blocks_panel(data)
    assert panel.figure is not None
    assert {t.name for t in panel.figure.data} == {"mlp", "mlp_up", "qkv_proj", "lm_head", OUTSIDE}
    data.roofline = dashboard_roofline(store, data.runs, data.blocks)
    assert data.roofline is not None and data.roofline.run_id == "char-d1"
    drawn = roofline_panel(data)
    measured = [t for t in drawn.figure.data if t.name in ("forward", "backward")]
    assert measured and "qkv_proj" in list(measured[0].text)


def test_blocks_and_roofline_draw_the_same_run_of_a_configuration(tmp_db) -> None:
    """A newer run of the same configuration made under a profiler: both panels keep the run without one."""
    store = ResultsStore(tmp_db)
    save_run(store, _run("char-clean", "char"))
    save_run(store, _run("char-profiled", "char"), profiler="torch")
    data = collect(store)
    assert set(block_shares(data)["run_id"]) == {"char-clean"}
    data.roofline = dashboard_roofline(store, data.runs, data.blocks)
    assert data.roofline is not None and data.roofline.run_id == "char-clean"


@pytest.mark.slow
def test_roofline_of_a_real_tiny_run(tmp_db) -> None:
    args = ["run", "tiny", "--device", "cpu", "--nvtx-detail", "--steps", "2", "--warmup", "1",
            "--batch-size", "1", "--context-length", "32", "--attention", "math"]  # fmt: skip
    run = runner.invoke(app, args)
    assert run.exit_code == 0, run.output
    result = runner.invoke(app, ["roofline", "latest", "--measure", "--format", "json"])
    assert result.exit_code == 0, result.output
    tables = json.loads(result.stdout)
    assert "measured: fp32 matmul" in tables["roofs"][0]["roofs"]
    rows = pd.DataFrame(next(v for k, v in tables.items() if k.startswith("sub-blocks")))
    timed = rows[rows["time (ns)"].notna()].set_index(["sub-block", "pass"])
    blocks = ("norm", "qkv_proj", "qk_scores", "softmax", "attn_v", "out_proj", "mlp_up", "mlp_act",
              "mlp_down", "lm_head")  # fmt: skip
    expected = {(b, p) for b in blocks for p in ("forward", "backward")}
    assert expected | {("embedding", "forward"), ("optimizer", "optimizer")} == set(timed.index)
    assert (timed["achieved GB/s"] > 0).all() and set(timed["bound"]) <= {"compute", "memory"}
    work = timed[timed["flops"] > 0]  # all but TransformerLM's embedding (a gather: no FLOPs)
    assert (work["achieved TFLOP/s"] > 0).all() and (work["of roof (%)"] > 0).all()
    mfu = pd.DataFrame(tables["MFU (model FLOPs / time / peak)"]).set_index("phase")
    assert (mfu.loc[["forward", "backward", "step"], "MFU (%)"] > 0).all()


def test_roofline_command_says_why_a_point_lies_above_its_roof(tmp_db, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = _run("char-fast", "char", device="cuda", name="NVIDIA H100 80GB HBM3")
    # lm_head timed at 10 ns a step: far faster than an H100's roofs allow
    result.blocks = [b if b.block != "lm_head" else BlockRecord(b.step, None, "lm_head", "forward", 10)
                     for b in result.blocks]  # fmt: skip
    save_run(ResultsStore(tmp_db), result)
    out = runner.invoke(app, ["roofline", "char-fast", "--gpu", "H100"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    said = " ".join(out.output.split())
    report = run_report(ResultsStore(tmp_db, readonly=True), "char-fast", gpu="H100")
    row = report.table.set_index(["sub-block", "pass"]).loc[("lm_head", "forward")]
    assert row["of roof (%)"] > 100
    kind = "bandwidth" if row["bound"] == "memory" else "compute"
    assert f"lm_head forward: {row['of roof (%)']:.0f}% of the datasheet {kind} roof" in said
    assert ("stayed in cache" if kind == "bandwidth" else "the roof's peak is below") in said
    assert not any(line.startswith("qkv_proj") for line in report.above_roof())  # below its roof: silent


def test_a_run_across_ranks_counts_its_all_reduce_in_the_step(tmp_db) -> None:
    """The all-reduce is part of a step across ranks: the step's MFU and the blocks' step total hold it."""
    run = _run("tiny-ddp", "tiny", device="cuda", name="NVIDIA H100 80GB HBM3")
    run.config.nproc = 2
    run.steps = [StepRecord(i, i == 0, {"forward": 4_000_000, "backward": 8_000_000, "allreduce": 6_000_000,
                                        "optimizer": 2_000_000}, rank=r)
                 for r in (0, 1) for i in range(3)]  # fmt: skip
    store = ResultsStore(tmp_db)
    save_run(store, run)
    report = run_report(store, "tiny-ddp")
    notes = " ".join(report.notes)
    assert "sub-block times: timers of its first rank (harness blocks tiny-ddp); without a time: " in notes
    mfu = report.mfu_frame().set_index("phase")
    assert list(mfu.index) == ["forward", "backward", "allreduce", "optimizer", "step"]
    assert mfu.loc["allreduce", "flops"] == 0 and mfu.loc["allreduce", "time (ns)"] == 6_000_000
    assert mfu.loc["step", "time (ns)"] == 20_000_000
    assert mfu.loc["step", "flops"] == mfu.loc["forward", "flops"] + mfu.loc["backward", "flops"]
    assert mfu.loc["step", "MFU (%)"] == pytest.approx(mfu.loc["step", "flops"] / 20e-3 / H100_FP32 * 100)
    out = runner.invoke(app, ["blocks", "tiny-ddp", "--format", "json"])
    assert out.exit_code == 0, out.output
    rows = pd.DataFrame(json.loads(out.stdout))
    assert rows.loc[rows["block"] == "step", "Mean (ns)"].item() == 20_000_000
    allreduce = rows[rows["phase"] == "allreduce"].set_index("block")
    assert allreduce.loc[OUTSIDE, "Mean (ns)"] == 6_000_000


def test_a_run_placed_against_another_devices_roofs_is_told_so(tmp_db) -> None:
    """`roofline CPU_RUN --gpu H100` places a CPU run's times against H100's roofs (MFU 0.0%): a note says
    the run ran elsewhere and what its shares then mean; none for a run on that GPU, nor for its own roofs."""
    store = ResultsStore(tmp_db)
    save_run(store, _run("char-cpu", "char", blocks=False))
    save_run(store, _run("char-a100", "char", blocks=False, device="cuda", name="NVIDIA A100-SXM4-80GB"))
    save_run(store, _run("char-h100", "char", blocks=False, device="cuda", name="NVIDIA H100 80GB HBM3"))
    told = (
        "run char-cpu ran on AMD EPYC (a CPU), not on H100: its times are placed against H100's datasheet "
        "roofs, so the shares of the roof and MFU say how far it is from H100's peak, not how well it used "
        "its own device"
    )
    assert told in run_report(store, "char-cpu", gpu="H100").notes
    assert any(n.startswith("run char-a100 ran on NVIDIA A100-SXM4-80GB, not on H100:")
               for n in run_report(store, "char-a100", gpu="H100").notes)  # fmt: skip
    for quiet in (run_report(store, "char-h100", gpu="H100"), run_report(store, "char-a100")):
        assert not any(" ran on " in n for n in quiet.notes)
    out = runner.invoke(app, ["roofline", "char-cpu", "--gpu", "H100"], env={"COLUMNS": "300"})
    assert out.exit_code == 0 and told in " ".join(out.output.split())


def test_a_run_whose_gpu_has_no_peak_at_its_precision_is_told_why_mfu_is_missing(tmp_db) -> None:
    run = _run("tiny-v100", "tiny", blocks=False, device="cuda", name="Tesla V100-SXM2-16GB")
    run.config.precision = "bf16"
    store = ResultsStore(tmp_db)
    save_run(store, run)
    report = run_report(store, "tiny-v100")
    assert report.used is not None and report.used.peak_flops is None and report.used.bandwidth == 900e9
    assert report.mfu_frame()["MFU (%)"].isna().all()
    assert (
        "Tesla V100-SXM2-16GB, datasheet, bf16: the datasheet has no bf16 peak for it, so there is no "
        "compute roof: no bound, attainable FLOP/s, share of the roof or MFU"
    ) in report.notes
    assert not any("no bf16 peak" in n for n in run_report(store, "tiny-v100", gpu="A100").notes)


def test_a_run_above_another_gpus_roofs_is_said_to_have_run_elsewhere(tmp_db) -> None:
    """An H100 run placed against T4's roofs lies above them because it ran on the faster GPU: that is the
    why said, not a cache-resident working set or a peak below what the shape reaches."""
    run = _run("tiny-h100", "tiny", blocks=False, device="cuda", name="NVIDIA H100 80GB HBM3")
    phases = {"forward": 10_000, "backward": 20_000, "optimizer": 10_000}  # ns: faster than T4's roofs allow
    run.steps = [StepRecord(i, i == 0, dict(phases)) for i in range(3)]
    store = ResultsStore(tmp_db)
    save_run(store, run)
    lines = run_report(store, "tiny-h100", gpu="T4").above_roof()
    assert [line.split(":")[0] for line in lines] == [
        "forward (whole phase)",
        "backward (whole phase)",
        "optimizer (whole phase)",
    ]
    why = "it ran on NVIDIA H100 80GB HBM3, not on the device these roofs are of"
    assert all(line.endswith(why) for line in lines)
    assert "of the datasheet bandwidth roof (" in lines[2] and "against 320.0 GB/s)" in lines[2]
    assert not any("stayed in cache" in line or "peak is below" in line for line in lines)
    own = run_report(store, "tiny-h100").above_roof()  # its own GPU's roofs: the usual why
    assert own and not any(why in line for line in own)


@pytest.mark.parametrize(
    ("status", "error"),
    [("interrupted", "interrupted by SIGTERM after 1 of 2 measured steps"), ("oom", "CUDA out of memory")],
)
def test_roofline_of_a_run_that_did_not_finish_says_so(tmp_db, tmp_path, status: str, error: str) -> None:
    """A run stopped after its first measured step (Ctrl-C, SIGTERM) or out of memory: its tables, its notes
    and its figure say that it did not finish and how many steps its times are of."""
    store = ResultsStore(tmp_db)
    stopped = _run("char-stopped", "char", blocks=False)
    stopped.steps = stopped.steps[:2]  # its warm-up step and one measured step
    stopped.status, stopped.error = status, error
    save_run(store, stopped)
    page = tmp_path / "roofline.html"
    result = runner.invoke(app, ["roofline", "char-stopped", "--format", "json", "--html", str(page)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    said = f"run char-stopped did not finish ({status}: {error}): its times are of the 1 measured step it ran"
    assert f"note: {said} before it stopped" in result.stderr.splitlines()
    title = next(k for k in out if k.startswith("sub-blocks"))
    assert title.endswith(f"math attention ({status}: did not finish)")
    assert f"({status}: did not finish)" in page.read_text()
    save_run(store, _run("char-done", "char", blocks=False))
    done = runner.invoke(app, ["roofline", "char-done", "--format", "json"])
    assert done.exit_code == 0 and "did not finish" not in done.output


def test_a_point_above_a_datasheet_compute_roof_says_the_peak_is_at_boost_clock(tmp_db) -> None:
    """The datasheet peaks (workloads.peak) are NVIDIA's at boost clock: a point above one says so, not that
    the peak is a base-clock figure. An H100 run (fp32, batch 64 × context 256) whose LM head forward took
    100 µs a step: 157% of the H100's 67 TFLOP/s."""
    run = _run("tiny-fast", "tiny", device="cuda", name="NVIDIA H100 80GB HBM3")
    run.config.batch_size, run.config.context_length = 64, 256
    run.blocks = [b if b.block != "lm_head" else BlockRecord(b.step, None, "lm_head", "forward", 100_000)
                  for b in run.blocks]  # fmt: skip
    save_run(ResultsStore(tmp_db), run)
    out = runner.invoke(app, ["roofline", "tiny-fast", "--format", "csv"])
    assert out.exit_code == 0, out.output
    said = " ".join(out.stderr.split())
    assert (
        "lm_head forward: 157% of the datasheet compute roof (104.858 against 67.000 TFLOP/s): the roof's "
        "peak is below what this shape reaches (a datasheet peak is the dense rate at boost clock of the "
        "run's precision; fp32's is the CUDA cores', which TF32 matmuls pass), or the analytic count charges "
        "work its kernels skip"
    ) in said
    assert "base-clock" not in said and "measured peak" not in said


def test_the_note_names_the_rows_without_a_time_of_this_model(tmp_db) -> None:
    """char (GPT-2 family) has no RoPE row, and a pass its blocks never timed is named whole: the note lists
    what the table shows without a time, not a fixed list."""
    store = ResultsStore(tmp_db)
    run = _run("char-fwd", "char")
    run.blocks = [b for b in run.blocks if b.phase == "forward"]  # as a trace has them: forward ranges only
    save_run(store, run)
    report = run_report(store, "char-fwd")
    note = next(n for n in report.notes if n.startswith("sub-block times"))
    assert note == (
        "sub-block times: timers (harness blocks char-fwd); without a time: embedding, norm, qk_scores, "
        "softmax, attn_v, out_proj, mlp_act, mlp_down, residual, loss (forward); every backward row"
    )
    table = report.table
    untimed = table[table["time (ns)"].isna() & (table["pass"] == "forward")]["sub-block"].tolist()
    assert untimed == ["embedding", "norm", "qk_scores", "softmax", "attn_v", "out_proj", "mlp_act",
                       "mlp_down", "residual", "loss"]  # fmt: skip
    assert table[table["pass"] == "backward"]["time (ns)"].isna().all()
    assert "rope" not in set(table["sub-block"])
