"""Per-block breakdown (--nvtx-detail): timers, the trace reader, the table, the store, `harness blocks`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from kineto_data import write_trace
from typer.testing import CliRunner

import workloads
from analysis.trace.opening import open_trace
from analysis.views.blocks import GROUPS, LAYER, LEAVES, OUTSIDE, block_records, block_table, leaf_sum_check
from harness.cli import app
from harness.core.records import BlockRecord, RunConfig, RunResult, StepRecord
from harness.execution.block_timers import BlockTimers
from harness.execution.runner import run_workload
from harness.experiments.run_tables import block_report
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()
MATH_LEAVES = {"embedding", "norm", "qkv_proj", "qk_scores", "softmax", "attn_v", "out_proj", "mlp_up",
               "mlp_act", "mlp_down", "lm_head"}  # fmt: skip


def test_block_names_are_the_workloads_range_names() -> None:
    names = set(workloads.DETAIL_RANGES.values()) | set(workloads.OUTER_RANGES.values())
    assert names == set(LEAVES) | set(GROUPS)


def _train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    loss = workloads.loss_fn(model(x), y)
    loss.backward()
    grad = model.blocks[0].attn.qkv.weight.grad.clone()
    model.zero_grad(set_to_none=True)
    return loss.detach(), grad


def test_timers_leave_outputs_and_gradients_bit_identical() -> None:
    spec = workloads.get_spec("char")
    model = workloads.build_model(spec, attention="math")
    x, y = workloads.synthetic_batch(spec, 2, 16, generator=torch.Generator().manual_seed(1))
    plain = _train(model, x, y)
    timers = BlockTimers(model, torch.device("cpu"), RunConfig(model="char", warmup=0, attention="math"))
    timed = _train(model, x, y)
    timers.next_step()
    timers.remove()
    assert torch.equal(plain[0], timed[0]) and torch.equal(plain[1], timed[1])
    records = pd.DataFrame([r.__dict__ for r in timers.records()])
    fwd = records[records["phase"] == "forward"]
    bwd = records[records["phase"] == "backward"]
    assert set(fwd["block"]) == MATH_LEAVES | {"attention", "mlp", LAYER}
    assert set(bwd["block"]) == MATH_LEAVES - {"embedding"} | {"attention", "mlp", LAYER}
    assert (records["duration_ns"] > 0).all() and set(records["step"]) == {0}
    per_layer = fwd[fwd["block"] == "qkv_proj"]
    assert sorted(per_layer["layer"]) == [0, 1, 2, 3] and (per_layer["calls"] == 1).all()
    norms = {r.layer: r.calls for r in timers.records() if r.block == "norm" and r.phase == "forward"}
    assert norms == {0: 2, 1: 2, 2: 2, 3: 2, None: 1}
    # hooks are gone: a later step records nothing
    _train(model, x, y)
    assert len(timers.records()) == len(records)


def test_timers_split_generate_into_prefill_and_decode() -> None:
    config = RunConfig(model="char", mode="generate", device="cpu", warmup=1, steps=2, new_tokens=4,
                       batch_size=1, context_length=8, nvtx_detail=True)  # fmt: skip
    result = run_workload(config)
    records = pd.DataFrame([r.__dict__ for r in result.blocks])
    assert set(records["step"]) == {1, 2} and set(records["phase"]) == {"prefill", "decode"}
    mlp = records[(records["block"] == "mlp") & (records["layer"] == 0)].set_index(["step", "phase"])
    assert mlp["calls"].to_dict() == {
        (1, "prefill"): 1,
        (1, "decode"): 3,
        (2, "prefill"): 1,
        (2, "decode"): 3,
    }


def _records(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["step", "layer", "block", "phase", "duration_ns", "calls"])
    df["layer"] = df["layer"].astype("Int64")
    return df


def test_block_table_outside_blocks_are_the_rest_of_each_phase() -> None:
    # two steps; forward: a layer (attention 40 = qkv 10 + sdpa 20 + rest, mlp 30) and lm_head 5 (ns)
    rows = []
    for step in (3, 4):
        rows += [(step, 0, LAYER, "forward", 80, 1), (step, 0, "attention", "forward", 40, 1),
                 (step, 0, "qkv_proj", "forward", 10, 1), (step, 0, "sdpa", "forward", 20, 1),
                 (step, 0, "mlp", "forward", 30, 1), (step, 0, "mlp_up", "forward", 30, 1),
                 (step, None, "lm_head", "forward", 5, 1),
                 (step, 0, "qkv_proj", "backward", 25, 1)]  # fmt: skip
    table = block_table(_records(rows), {"forward": 100.0, "backward": 50.0, "optimizer": 50.0}, steps=2)
    got = table.set_index(["phase", "block"])
    assert got.loc[("forward", OUTSIDE), "Mean (ns)"] == 100 - (10 + 20 + 30 + 5)
    assert got.loc[("backward", OUTSIDE), "Mean (ns)"] == 25
    assert got.loc[("optimizer", OUTSIDE), "Mean (ns)"] == 50
    assert got.loc[("all", "step"), "Mean (ns)"] == 200 and got.loc[("all", "step"), "Step (%)"] == 100
    assert (
        got.loc[("forward", "qkv_proj"), "Step (%)"] == 5 and got.loc[("forward", "qkv_proj"), "Count"] == 2
    )
    assert got.loc[("forward", "attention"), "kind"] == "group"
    assert got.loc[("forward", "sdpa"), "parent"] == "attention"
    assert leaf_sum_check(table) == pytest.approx(1.0)
    by_layer = block_table(_records(rows), {"forward": 100.0}, steps=2, by_layer=True)
    assert list(by_layer.columns[:3]) == ["phase", "block", "layer"]
    assert by_layer[by_layer["block"] == "lm_head"]["layer"].isna().all()


def _annotation(name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def _kineto_with_kernels(path: Path) -> Path:
    """One step (forward > layer_0 > attention > qkv_proj, then lm_head), one kernel launched in each of
    qkv_proj (4 µs) and lm_head (6 µs); times in µs as Kineto writes them."""
    events = [
        _annotation("step", 0, 100),
        _annotation("forward", 1, 60),
        _annotation("layer_0", 2, 30),
        _annotation("attention", 3, 20),
        _annotation("qkv_proj", 4, 10),
        _annotation("lm_head", 40, 8),
        _annotation("backward", 62, 30),
    ]
    for corr, ts, dur in ((1, 5, 4), (2, 41, 6)):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": ts, "dur": 1, "args": {"correlation": corr}})  # fmt: skip
        events.append({"ph": "X", "cat": "kernel", "name": f"k{corr}", "pid": 0, "tid": 7, "ts": ts + 50,
                       "dur": dur, "args": {"stream": 7, "correlation": corr, "device": 0}})  # fmt: skip
    return write_trace(path, events)


def test_block_records_from_a_trace_cpu_and_gpu_time(tmp_path: Path) -> None:
    path = _kineto_with_kernels(tmp_path / "t.json")
    names = set(LEAVES) | set(GROUPS)
    with open_trace(path, cache=False) as trace:
        cpu, cpu_source = block_records(trace, names, ("forward", "backward"), gpu=False, step_offset=5)
        gpu, gpu_source = block_records(trace, names, ("forward", "backward"), step_offset=5)
    assert cpu_source == "torch-trace" and gpu_source == "nvtx-gpu"
    assert set(cpu["step"]) == {5} and set(cpu["phase"]) == {"forward"} and (cpu["calls"] == 1).all()
    assert _times(cpu) == {(LAYER, 0): 30_000, ("attention", 0): 20_000, ("qkv_proj", 0): 10_000,
                           ("lm_head", None): 8_000}  # fmt: skip
    # GPU time: the kernels launched inside each range (and inside the ranges it holds)
    assert _times(gpu) == {(LAYER, 0): 4_000, ("attention", 0): 4_000, ("qkv_proj", 0): 4_000,
                           ("lm_head", None): 6_000}  # fmt: skip


def _times(records: pd.DataFrame) -> dict[tuple[str, int | None], int]:
    return {
        (r.block, None if pd.isna(r.layer) else int(r.layer)): int(r.duration_ns)
        for r in records.itertuples(index=False)
    }


def test_store_keeps_block_timings(tmp_db) -> None:
    store = ResultsStore(tmp_db)
    from harness.core.records import BlockRecord

    result = RunResult(run_id="tiny-blk", config=RunConfig(model="tiny", nvtx_detail=True, warmup=0, steps=1),
                       status="ok", steps=[StepRecord(0, False, {"forward": 100})],
                       blocks=[BlockRecord(0, 1, "mlp", "forward", 40, 1),
                               BlockRecord(0, None, "lm_head", "forward", 9, 1)])  # fmt: skip
    save_run(store, result)
    got = store.block_timings(["tiny-blk"])
    assert got[["layer", "block", "duration_ns", "source"]].astype(object).values.tolist() == [
        [1, "mlp", 40, "timers"], [pd.NA, "lm_head", 9, "timers"]
    ]  # fmt: skip
    store.save_blocks("tiny-blk", _records([(0, None, "norm", "forward", 7, 3)]), "torch-trace")
    again = store.block_timings(["tiny-blk"])
    assert again[["block", "calls", "source"]].values.tolist() == [["norm", 3, "torch-trace"]]


def test_blocks_title_counts_its_steps(tmp_db) -> None:
    """The title says how many measured steps the means are over, one step as one."""
    store = ResultsStore(tmp_db)
    for run_id, steps in (("tiny-one", 1), ("tiny-two", 2)):
        config = RunConfig(model="tiny", nvtx_detail=True, warmup=0, steps=steps)
        timed = [StepRecord(i, False, {"forward": 100}) for i in range(steps)]
        blocks = [BlockRecord(i, 0, "mlp", "forward", 40, 1) for i in range(steps)]
        save_run(store, RunResult(run_id=run_id, config=config, status="ok", steps=timed, blocks=blocks))
    assert block_report(store, "tiny-one").title.endswith("mean per step over 1 step, source timers")
    assert block_report(store, "tiny-two").title.endswith("mean per step over 2 steps, source timers")


def test_blocks_of_a_run_that_did_not_finish_say_so(tmp_db) -> None:
    """Its table is of the steps it ran; `roofline` said so, `blocks` did not."""
    store = ResultsStore(tmp_db)
    config = RunConfig(model="tiny", nvtx_detail=True, warmup=0, steps=5)
    timed = [StepRecord(i, False, {"forward": 100}) for i in range(2)]
    blocks = [BlockRecord(i, 0, "mlp", "forward", 40, 1) for i in range(2)]
    result = RunResult(run_id="tiny-stopped", config=config, status="interrupted", error="KeyboardInterrupt",
                       steps=timed, blocks=blocks)  # fmt: skip
    save_run(store, result)
    report = block_report(store, "tiny-stopped")
    assert report.notes[0] == (
        "run tiny-stopped did not finish (interrupted: KeyboardInterrupt): its block times are of the "
        "2 measured steps it ran before it stopped"
    )


def test_a_run_across_ranks_keeps_its_first_ranks_block_times(tmp_db) -> None:
    """`run --nproc 2 --nvtx-detail`: every rank timed its blocks; the run keeps the first rank's (as a
    profiled run keeps its first rank's trace), and the table sets them against that rank's phases."""
    from harness.execution.ranks.multirank import Launched, combine

    config = RunConfig(model="tiny", nvtx_detail=True, warmup=0, steps=1, nproc=2)
    ranks = {}
    for rank, forward, mlp in ((0, 100, 40), (1, 300, 90)):
        steps = [StepRecord(0, False, {"forward": forward}, rank=rank)]
        blocks = [BlockRecord(0, 0, "mlp_up", "forward", mlp, 1)]
        ranks[rank] = RunResult(run_id="tiny-ranks", config=config, status="ok", steps=steps, blocks=blocks)
    result = combine(config, "tiny-ranks", Launched(ranks, 0, ""))
    assert [(b.block, b.duration_ns) for b in result.blocks] == [("mlp_up", 40)]
    store = ResultsStore(tmp_db)
    save_run(store, result)
    report = block_report(store, "tiny-ranks")
    rows = report.table.set_index(["phase", "block"])["Mean (ns)"]
    assert rows[("forward", OUTSIDE)] == 100 - 40 and rows[("all", "step")] == 100
    assert "across 2 ranks: the block and phase times of rank 0" in report.notes


def _blocks_json(*args: str) -> tuple[list[dict], str]:
    result = runner.invoke(app, ["blocks", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    return json.loads(text), result.stderr


@pytest.mark.slow
def test_tiny_run_then_blocks_from_the_timers(tmp_db) -> None:
    """The issue's test: `harness run tiny --device cpu --nvtx-detail`, then `harness blocks` (a smaller
    batch and context than the defaults, and --attention math: QKᵀ, softmax and ·V are blocks apart)."""
    args = ["run", "tiny", "--device", "cpu", "--nvtx-detail", "--steps", "3", "--warmup", "1",
            "--batch-size", "1", "--context-length", "32", "--attention", "math"]  # fmt: skip
    run = runner.invoke(app, args)
    assert run.exit_code == 0, run.output
    rows, notes = _blocks_json()
    table = pd.DataFrame(rows)
    assert set(table["source"]) == {"timers"} and "source: timers" in notes
    forward = table[table["phase"] == "forward"]
    assert set(forward["block"]) == MATH_LEAVES | {LAYER, "attention", "mlp", OUTSIDE}
    blocks = table[table["kind"].isin(["leaf", "group"])]
    assert (blocks["Mean (ns)"] > 0).all() and (blocks["Count"] > 0).all()
    # the leaves and what is outside them add up to the step: each phase's leaves (summed from the timers)
    # are no more than the phase (timed apart, around them), so the rest is not negative
    step = float(table[table["block"] == "step"]["Mean (ns)"].iloc[0])
    parts = table[table["kind"].isin(["leaf", "outside"])]["Mean (ns)"].sum()
    assert parts == pytest.approx(step, rel=0.10)
    outside = table[table["block"] == OUTSIDE].set_index("phase")["Mean (ns)"]
    phase_ns = {p: float(outside[p]) + float(table[(table["phase"] == p) & (table["kind"] == "leaf")]
                                              ["Mean (ns)"].sum()) for p in outside.index}  # fmt: skip
    assert all(outside[p] >= -0.10 * phase_ns[p] for p in outside.index)
    assert set(table[table["phase"] == "backward"]["block"]) >= {"qkv_proj", "mlp_down", "softmax"}
    per_layer, _ = _blocks_json("latest", "--by-layer")
    layers = {r["layer"] for r in per_layer if r["block"] == "mlp_up"}
    assert layers == {0, 1, 2, 3}
    people = runner.invoke(app, ["blocks"])
    assert people.exit_code == 0 and "source timers" in people.stdout and "qk_scores" in people.stdout


def test_blocks_puts_the_final_norm_in_no_layer(tmp_db) -> None:
    """`harness blocks` of a tiny run (3 measured steps, 4 layers of two norms each, then the final norm):
    the norms inside the layers are one row under `layer` (24 calls a phase), the final norm another with no
    parent (3 calls), as `--by-layer` places it; the `norm` row under `layer` counted 27 with it."""
    args = ["run", "tiny", "--device", "cpu", "--nvtx-detail", "--steps", "3", "--warmup", "1",
            "--batch-size", "1", "--context-length", "16"]  # fmt: skip
    assert runner.invoke(app, args).exit_code == 0
    rows, _ = _blocks_json()
    per_layer, _ = _blocks_json("latest", "--by-layer")
    for phase in ("forward", "backward"):
        norms = [(r["parent"], r["Count"]) for r in rows if r["block"] == "norm" and r["phase"] == phase]
        assert norms == [(LAYER, 24), (None, 3)]
        final = [r for r in rows if r["block"] == "norm" and r["phase"] == phase and r["parent"] is None]
        outer = [r for r in per_layer if r["block"] == "norm" and r["phase"] == phase and r["layer"] is None]
        assert final[0]["Mean (ns)"] == outer[0]["Mean (ns)"] and outer[0]["parent"] is None


@pytest.mark.slow
def test_torch_backend_blocks_come_from_its_trace(tmp_db, tmp_path: Path) -> None:
    args = ["run", "char", "--device", "cpu", "--nvtx-detail", "--steps", "2", "--warmup", "1",
            "--batch-size", "2", "--profiler", "torch", "--profile-dir", str(tmp_path)]  # fmt: skip
    run = runner.invoke(app, args)
    assert run.exit_code == 0, run.output
    store = ResultsStore(tmp_db, readonly=True)
    stored = store.block_timings()
    assert set(stored["source"]) == {"torch-trace"} and set(stored["step"]) == {1, 2}
    rows, notes = _blocks_json()
    table = pd.DataFrame(rows)
    assert "read from" not in notes  # stored when the run was analysed
    forward = table[table["phase"] == "forward"].set_index("block")
    assert {"sdpa", "qkv_proj", "mlp_act", "lm_head"} <= set(forward.index)
    assert (forward.loc[["sdpa", "qkv_proj", "mlp_act"], "Mean (ns)"] > 0).all()
    backward = table[table["phase"] == "backward"]
    assert backward["block"].tolist() == [OUTSIDE]
    assert np.isclose(leaf_sum_check(pd.DataFrame(rows)), 1.0)


def test_blocks_of_a_run_without_detail_is_one_line(tmp_db) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, RunResult(run_id="tiny-plain", config=RunConfig(model="tiny"), status="ok",
                         steps=[StepRecord(0, False, {"forward": 1})]))  # fmt: skip
    result = runner.invoke(app, ["blocks", "tiny-plain"])
    assert result.exit_code == 2 and "without --nvtx-detail" in result.output
    assert "Traceback" not in result.output
    latest = runner.invoke(app, ["blocks"])
    assert latest.exit_code == 2 and "no run made with --nvtx-detail" in latest.output


def test_blocks_of_a_generate_run_without_detail_names_a_generate_run(tmp_db) -> None:
    """The hint makes a run like the user's: a generate run's is `--mode generate`, not a training run."""
    store = ResultsStore(tmp_db)
    save_run(store, RunResult(run_id="char-gen", config=RunConfig(model="char", mode="generate"), status="ok",
                         steps=[StepRecord(0, False, {"prefill": 1, "decode": 2})]))  # fmt: skip
    result = runner.invoke(app, ["blocks", "char-gen"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "`harness run char --mode generate --nvtx-detail` makes a run that has" in result.output


def test_blocks_of_a_programs_run_names_a_model_to_run(tmp_db) -> None:
    """A `harness profile -- CMD` run is named after its program: the hint runs a model, not the program."""
    from harness.experiments.program import program_config

    store = ResultsStore(tmp_db)
    save_run(store, RunResult(run_id="myprog-1", config=program_config("myprog"), status="ok"))
    result = runner.invoke(app, ["blocks", "myprog-1"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "run myprog-1 is a program's (harness profile)" in result.output
    assert "harness run tiny --nvtx-detail" in result.output and "harness run myprog" not in result.output


@pytest.mark.slow
def test_nsys_run_blocks_come_from_its_export(tmp_db, tmp_path: Path, nsys_bin: str) -> None:
    args = ["run", "char", "--device", "cpu", "--nvtx-detail", "--steps", "2", "--warmup", "1",
            "--batch-size", "2", "--nsys", "--no-nsys-baseline", "--profile-dir", str(tmp_path)]  # fmt: skip
    run = runner.invoke(app, args)
    assert run.exit_code == 0, run.output
    stored = ResultsStore(tmp_db, readonly=True).block_timings()
    assert set(stored["source"]) == {"nvtx"} and set(stored["step"]) == {1, 2}  # the steps' NVTX payloads
    rows, _ = _blocks_json()
    forward = pd.DataFrame(rows).query("phase == 'forward'").set_index("block")
    assert (forward.loc[["sdpa", "mlp_up", "norm", "lm_head"], "Mean (ns)"] > 0).all()
    assert forward.loc["norm", "Count"].sum() == 2 * 9  # 2 steps × (4 layers × 2 + the final norm)
    assert forward.loc["norm", "Count"].tolist() == [2 * 8, 2]  # in the layers, then the final norm


def test_blocks_of_a_run_with_only_its_trace_are_read_from_it(tmp_db, tmp_path: Path) -> None:
    """A profiled run whose block times were never stored (an older harness): read from its trace, here a
    GPU trace, so the source is nvtx-gpu."""
    trace = _kineto_with_kernels(tmp_path / "run.pt.trace.json")
    config = RunConfig(model="tiny", warmup=5, steps=1, nvtx_detail=True)
    phases = {"forward": 60_000, "backward": 30_000, "optimizer": 10_000}
    result = RunResult(run_id="tiny-old", config=config, status="ok", steps=[StepRecord(5, False, phases)])
    save_run(ResultsStore(tmp_db), result, profiler="torch", artifacts={"trace": str(trace)})
    rows, notes = _blocks_json("tiny-old")
    assert f"read from {trace}" in notes and "source: nvtx-gpu" in notes
    table = pd.DataFrame(rows).set_index(["phase", "block"])
    assert table.loc[("forward", "qkv_proj"), "Mean (ns)"] == 4_000
    assert table.loc[("forward", OUTSIDE), "Mean (ns)"] == 60_000 - 4_000 - 6_000
    assert table.loc[("all", "step"), "Mean (ns)"] == 100_000
