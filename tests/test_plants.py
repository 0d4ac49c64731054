"""Planted bottlenecks (`harness run MODEL --plant CAUSE`, `python -m workloads.plants CAUSE`): each runs, and
each has the effect it claims, counted in the run (the loss's item() calls, the loader's waits inside its
`data` range, the optimizer's arguments, the copies, the graphs Dynamo made); the clean control has none."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

import workloads
from harness.cli import app
from harness.core import nvtx_ranges
from harness.core.records import RunConfig
from harness.execution.runner import run_workload
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore
from workloads.names import DATA
from workloads.plants import __main__ as program
from workloads.plants import catalogue as plants
from workloads.plants import steps as planted

runner = CliRunner()
ON_CPU = [name for name, cause in plants.CAUSES.items() if cause.cpu != plants.REFUSED]
FAST = [name for name in ON_CPU if name != "recompile"]  # recompile compiles every step: tests marked slow


def config(plant: str | None, **kw: Any) -> RunConfig:
    return RunConfig(**{"model": "char", "device": "cpu", "warmup": 1, "steps": 2, "plant": plant, **kw})


def one_line(result: Any) -> str:
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.fixture
def ranges() -> Iterator[list[tuple[str, int]]]:
    """The harness's NVTX ranges of a run, as (name, duration in ns), through the emitter's mirror."""
    seen: list[tuple[str, int]] = []

    def enter(name: str) -> tuple[str, int]:
        return name, time.perf_counter_ns()

    def leave(handle: tuple[str, int]) -> None:
        seen.append((handle[0], time.perf_counter_ns() - handle[1]))

    nvtx_ranges.set_mirror((enter, leave))
    yield seen
    nvtx_ranges.set_mirror(None)


def test_the_catalogue_loads_without_torch() -> None:
    """`--help` lists the causes from the catalogue alone: importing it (and the package) loads no torch."""
    code = "import sys, workloads.plants; print(sorted(m for m in sys.modules if m.startswith('torch')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


def test_each_cause_in_the_code_is_the_catalogues() -> None:
    assert list(plants.NAMES) == list(planted.PLANTS)
    for name in plants.NAMES:
        plant = planted.make(name)
        assert plant.settings == plants.CAUSES[name].settings and plant.gpu_only == plants.gpu_only(name)
    assert len({c.rule for c in plants.CAUSES.values()}) == len(plants.CAUSES)  # one rule, one cause


def test_help_lists_each_cause_with_its_line() -> None:
    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    for cause in plants.CAUSES.values():
        assert f"{cause.name}: {cause.does}" in result.output


def test_an_unknown_cause_is_one_line_naming_the_known_ones(tmp_db: str) -> None:
    result = runner.invoke(app, ["run", "char", "--device", "cpu", "--plant", "slow-disk"])
    assert result.exit_code == 2
    line = one_line(result)
    assert "unknown plant 'slow-disk'" in line and all(name in line for name in plants.NAMES)


def test_a_gpu_cause_is_refused_on_the_cpu(tmp_db: str) -> None:
    for command in (["run", "char"], ["sweep", "--models", "char"]):
        result = runner.invoke(app, [*command, "--device", "cpu", "--plant", "fp32-matmul"])
        assert result.exit_code == 2
        assert "--plant fp32-matmul is a GPU cause" in one_line(result)
    assert ResultsStore(tmp_db).runs().empty


def test_a_cause_is_planted_in_the_train_step_only(tmp_db: str) -> None:
    result = runner.invoke(
        app, ["run", "char", "--device", "cpu", "--mode", "forward", "--plant", "host-sync"]
    )
    assert result.exit_code == 2
    assert "needs --mode train, not forward" in one_line(result)


@pytest.mark.parametrize("cause", FAST)
def test_each_cause_runs_and_is_stored(tmp_db: str, cause: str) -> None:
    args = ["run", "char", "--device", "cpu", "--steps", "2", "--warmup", "1", "--plant", cause]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    shown = runner.invoke(app, ["show", "latest", "--format", "json"], catch_exceptions=False)
    run = json.loads(shown.stdout)["run"]
    assert run["plant"] == cause and run["status"] == "ok"
    assert run["measured steps"] == 2
    for name, value in plants.settings(cause).items():  # what the cause needs is what was stored
        assert run[name.replace("_", " ")] == value


def test_a_fix_given_twice_is_stored_once(tmp_db: str) -> None:
    """`--fix drop-item --fix drop-item` was stored as two fixes: a configuration apart from the same run with
    one (its drift measured apart), and `--fix drop-item` twice in every command made from it."""
    args = ["run", "char", "--device", "cpu", "--steps", "1", "--warmup", "0", "--plant", "host-sync",
            "--loss-every", "5", "--fix", "drop-item", "--fix", "drop-item"]  # fmt: skip
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    store = ResultsStore(tmp_db)
    (run_id,) = store.runs()["run_id"]
    assert store.get(run_id).config["fixes"] == ["drop-item"]


def test_a_run_without_a_plant_shows_none(tmp_db: str) -> None:
    result = run_workload(config(None, steps=1))
    assert result.config.plant is None and "dynamo" not in result.extra
    save_run(ResultsStore(tmp_db), result)
    shown = runner.invoke(app, ["show", "latest", "--format", "json"], catch_exceptions=False)
    assert "plant" not in json.loads(shown.stdout)["run"]


def test_host_sync_reads_the_loss_once_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    real = torch.Tensor.item
    calls: Counter[str] = Counter()

    def item(self: torch.Tensor) -> Any:
        calls["loss" if self.requires_grad else "other"] += 1
        return real(self)

    monkeypatch.setattr(torch.Tensor, "item", item)
    run_workload(config("clean"))
    assert calls["loss"] == 0
    run_workload(config("host-sync"))
    assert calls["loss"] == 3  # warmup + measured steps


def test_slow_loader_waits_inside_its_data_range(ranges: list[tuple[str, int]]) -> None:
    run_workload(config("clean"))
    assert [n for n, _ in ranges if n == DATA] == []
    ranges.clear()
    result = run_workload(config("slow-loader"))
    waits = [ns for n, ns in ranges if n == DATA]
    batch = result.config.batch_size * planted.SAMPLE_WAIT_S * 1e9
    assert len(waits) == 3 and all(ns >= batch for ns in waits)
    # inside forward: each step's forward is at least its wait (the step's time holds the loader's)
    assert all(s.phases["forward"] >= batch for s in result.steps)
    # ranges as they close: `data` inside forward, inside the step
    assert [n for n, _ in ranges][:5] == [DATA, "forward", "backward", "optimizer", "step"]


def test_slow_loader_gives_the_steps_own_batch() -> None:
    x, y = workloads.synthetic_batch(
        workloads.get_spec("char"), 3, 16, generator=torch.Generator().manual_seed(1)
    )
    fetch = planted.SlowLoader(wait_s=0).batches(x, y, torch.device("cpu"))
    for _ in range(2):
        xb, yb = fetch()
        assert torch.equal(xb, x) and torch.equal(yb, y)


def test_optimizer_loop_builds_adamw_with_foreach_false(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Any] = []
    real = torch.optim.AdamW

    def adamw(*args: Any, **kwargs: Any) -> torch.optim.Optimizer:
        opt = real(*args, **kwargs)
        built.append(opt.defaults["foreach"])
        return opt

    monkeypatch.setattr(torch.optim, "AdamW", adamw)
    run_workload(config("clean"))
    run_workload(config("optimizer-loop"))
    assert built == [None, False]  # torch's choice, then the loop asked for


def _ops(cause: str | None) -> tuple[Counter[tuple[str, str]], RunConfig]:
    """aten ops of a run with their input shapes, counted, from torch.profiler around the whole run."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        result = run_workload(config(cause))
    counts = Counter((e.name, str(e.input_shapes[0] if e.input_shapes else [])) for e in prof.events())
    return counts, result.config


def test_copies_happen_every_step() -> None:
    spec = workloads.get_spec("char")
    logits = str([4, spec.context_length, spec.vocab_size])
    tokens = str([4, spec.context_length])
    clean, _ = _ops("clean")
    d2h, _ = _ops("d2h-copy")
    h2d, _ = _ops("pageable-h2d")
    assert clean[("aten::_to_copy", logits)] == 0 and d2h[("aten::_to_copy", logits)] == 3
    assert clean[("aten::_to_copy", tokens)] == 0 and h2d[("aten::_to_copy", tokens)] == 6  # x and y


def test_launch_bound_runs_batch_one_and_tiny_ops_per_parameter() -> None:
    clean, _ = _ops("clean")
    small, cfg = _ops("launch-bound")
    n = len(list(workloads.build_model(workloads.get_spec("char")).parameters()))
    assert cfg.batch_size == 1
    pows = sum(v for (name, _), v in small.items() if name == "aten::pow")
    # one pow per parameter in forward, one in its backward (pow_backward), in each of the 3 steps
    assert pows - sum(v for (name, _), v in clean.items() if name == "aten::pow") == 2 * 3 * n


def test_math_attention_runs_the_scores_and_softmax() -> None:
    clean, _ = _ops("clean")
    math, cfg = _ops("math-attention")
    softmax = "aten::_softmax"
    assert cfg.attention == "math"
    layers = workloads.get_spec("char").num_layers
    assert sum(v for (n, _), v in clean.items() if n == softmax) == 0
    assert sum(v for (n, _), v in math.items() if n == softmax) == 3 * layers


def test_recompile_makes_a_graph_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dynamo's own counters, recorded with the run: one graph a step. (Its eager backend here: what
    recompiles is Dynamo's decision, the same whichever backend builds the graph.)"""
    monkeypatch.setitem(planted.PLANTS, "recompile", lambda knobs: planted.Recompile(knobs, backend="eager"))
    result = run_workload(config("recompile"))
    assert result.extra["dynamo"]["frames"] == 3 and result.extra["dynamo"]["graphs"] == 3
    again = run_workload(config("clean"))
    assert "dynamo" not in again.extra


@pytest.mark.slow
def test_recompile_runs_with_inductor(tmp_db: str) -> None:
    args = ["run", "char", "--device", "cpu", "--steps", "2", "--warmup", "1", "--plant", "recompile"]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (run_id,) = ResultsStore(tmp_db).runs()["run_id"]
    assert ResultsStore(tmp_db).get(run_id).summary["dynamo"]["graphs"] == 3


def test_the_program_emits_a_users_ranges(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    pushed: list[str] = []
    monkeypatch.setattr(program, "push", pushed.append)
    monkeypatch.setattr(program, "pop", lambda: None)
    for cause in FAST:
        pushed.clear()
        assert (
            program.main([cause, "--model", "char", "--device", "cpu", "--steps", "1", "--warmup", "1"]) == 0
        )
        step = ["step", "forward", "backward", "optimizer"]
        if planted.make(cause).batches(*_batch(), torch.device("cpu")) is not None:
            step.insert(1, "data")
        assert pushed == step * 2, cause
    assert "clean: char on cpu, 1 step," in capsys.readouterr().out


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    return workloads.synthetic_batch(workloads.get_spec("char"), 2, 8)


def test_the_program_refuses_a_gpu_cause_on_the_cpu(capsys: pytest.CaptureFixture) -> None:
    assert program.main(["fp32-matmul", "--device", "cpu"]) == 2
    assert "fp32-matmul is a GPU cause" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--steps", "0"], "argument --steps: must be 1 or more, got 0"),
        (["--warmup", "-1"], "argument --warmup: must be 0 or more, got -1"),
        (["--batch-size", "0"], "argument --batch-size: must be 1 or more, got 0"),
        (["--loader-workers", "-1"], "argument --loader-workers: must be 0 or more, got -1"),
        (["--loader-workers", "1000000"], "argument --loader-workers: must be 256 or less, got 1000000"),
        (["--loss-every", "0"], "argument --loss-every: must be 1 or more, got 0"),
        (["--steps", "two"], "argument --steps: takes a whole number, not 'two'"),
        (["--steps", "١٢"], "argument --steps: takes a whole number, not '١٢'"),
        (["--warmup", "1_0"], "argument --warmup: takes a whole number, not '1_0'"),
        (["--steps", "9" * 30], f"argument --steps: must be {2**63 - 1} or less, got {'9' * 30}"),
    ],
)
def test_the_program_refuses_counts_that_time_nothing_in_one_line(
    capsys: pytest.CaptureFixture, args: list[str], said: str
) -> None:
    """--steps 0 printed `0 steps, 86531290.1 ms a step` (the clock never started: the machine's uptime),
    --warmup -1 the same for one step, --batch-size 0 a DataLoader traceback; --loader-workers -1 and
    --loss-every 0 ran as if given something else; int() read other scripts' digits and '1_0'.
    Each is argparse's usage and one error line, exit 2."""
    with pytest.raises(SystemExit) as stopped:
        program.main(["slow-loader", "--model", "char", "--device", "cpu", *args])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == f"python -m workloads.plants: error: {said}"
    assert "Traceback" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
def test_the_program_refuses_cuda_where_there_is_none(capsys: pytest.CaptureFixture) -> None:
    """It ended in torch's `AssertionError: Torch not compiled with CUDA enabled` traceback."""
    assert program.main(["clean", "--model", "char", "--device", "cuda"]) == 2
    assert capsys.readouterr().err.startswith("--device cuda: this torch (")


def test_the_program_runs_under_plain_python() -> None:
    """Its own process, nothing of the harness imported."""
    code = textwrap.dedent("""
        import runpy, sys
        sys.argv = ["x", "host-sync", "--model", "char", "--device", "cpu", "--steps", "1", "--warmup", "0"]
        try:
            runpy.run_module("workloads.plants", run_name="__main__")
        except SystemExit as e:
            ours = sorted(m for m in sys.modules if m.split(".")[0] in ("harness", "analysis"))
            print("exit", e.code, ours)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "host-sync: char on cpu, 1 step," in done.stdout, done.stderr
    assert "exit 0 []" in done.stdout


def test_a_fix_keeps_its_field_over_the_plants_setting() -> None:
    assert RunConfig(model="char", plant="launch-bound", batch_size=8).batch_size == 1
    fixed = RunConfig(model="char", plant="launch-bound", batch_size=8, fixes=["larger-batch"])
    assert fixed.batch_size == 8
    assert RunConfig(model="char", plant="optimizer-loop").optimizer == "loop"
    assert RunConfig(
        model="char", plant="optimizer-loop", optimizer="fused", fixes=["fused-adamw"]
    ).optimizer == ("fused")


def test_loss_every_reads_the_loss_once_in_n_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    real = torch.Tensor.item
    reads: list[float] = []

    def item(self: torch.Tensor) -> Any:
        reads.append(real(self))
        return reads[-1]

    plant = planted.make("host-sync", plants.Knobs(loss_every=3))
    monkeypatch.setattr(torch.Tensor, "item", item)
    for i in range(7):
        plant.after_loss(torch.zeros(1), torch.tensor(float(i), requires_grad=True) * 1.0)
    assert reads == [0.0 + 1 + 2, 3.0 + 4 + 5]  # read once in 3 steps, the sum kept on the device between
    assert plant.losses == [1.0, 4.0]
    assert RunConfig(model="char", plant="host-sync", loss_every=3).knobs.loss_every == 3


def test_loader_workers_load_in_worker_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[dict[str, Any]] = []
    real = planted.DataLoader

    def loader(*args: Any, **kwargs: Any) -> Any:
        built.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(planted, "DataLoader", loader)
    x, y = _batch()
    fetch = planted.SlowLoader(plants.Knobs(loader_workers=2), wait_s=0).batches(x, y, torch.device("cpu"))
    for _ in range(3):
        xb, yb = fetch()
        assert torch.equal(xb, x) and torch.equal(yb, y)
    assert built[0]["num_workers"] == 2 and built[0]["persistent_workers"]


def test_the_optimizer_knob_builds_adamw_as_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[dict[str, Any]] = []
    real = torch.optim.AdamW

    def adamw(*args: Any, **kwargs: Any) -> torch.optim.Optimizer:
        opt = real(*args, **kwargs)
        built.append({k: opt.defaults[k] for k in ("foreach", "fused")})
        return opt

    monkeypatch.setattr(torch.optim, "AdamW", adamw)
    for choice in ("fused", "foreach"):
        run_workload(config("optimizer-loop", optimizer=choice, fixes=["fused-adamw"], steps=1))
    assert built == [{"foreach": None, "fused": True}, {"foreach": True, "fused": None}]
