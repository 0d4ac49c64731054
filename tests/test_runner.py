"""The workload runner: timing records, modes, OOM handling."""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import workloads
from analysis.runs.steady import phase_stats
from harness.core.records import RunConfig, measured_steps, phases_of
from harness.core.signals import Terminated
from harness.execution.runner import run_workload
from harness.experiments.run_tables import results_table
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore


def test_train_records_every_step_and_excludes_warmup() -> None:
    result = run_workload(RunConfig(model="char", device="cpu", warmup=2, steps=3, batch_size=2))
    assert result.status == "ok"
    assert [s.step for s in result.steps] == [0, 1, 2, 3, 4]
    assert [s.warmup for s in result.steps] == [True, True, False, False, False]
    for s in result.steps:
        assert list(s.phases) == ["forward", "backward", "optimizer"]
        assert all(ns > 0 for ns in s.phases.values())
    stats = {p.phase: p for p in phase_stats(measured_steps(result), phases_of(result))}
    assert stats["forward"].count == 3
    measured = [s.phases["backward"] for s in result.steps if not s.warmup]
    assert stats["backward"].mean_ns == pytest.approx(sum(measured) / 3)
    assert stats["backward"].min_ns == min(measured)
    assert result.model is not None and result.model.params == workloads.count_params(
        workloads.build_model(workloads.get_spec("char"))
    )
    assert result.tokens_per_s and result.tokens_per_s > 0
    assert result.flops_per_step == pytest.approx(
        workloads.flops.train_flops(workloads.get_spec("char"), 2, 64)
    )
    assert result.mfu is None  # no known peak for a CPU
    assert result.peak_memory_bytes and result.peak_memory_bytes > 10 * 2**20


def test_forward_mode_times_forward_only() -> None:
    result = run_workload(RunConfig(model="char", mode="forward", device="cpu", warmup=1, steps=2))
    assert [list(s.phases) for s in result.steps] == [["forward"]] * 3


def test_generate_mode_reports_latency() -> None:
    result = run_workload(
        RunConfig(model="char", mode="generate", device="cpu", warmup=1, steps=2, new_tokens=5, batch_size=2)
    )
    assert result.status == "ok"
    assert [list(s.phases) for s in result.steps] == [["prefill", "decode"]] * 3
    serving = result.extra["serving"]
    assert serving["ttft_ns"]["mean_ns"] > 0 and serving["tpot_ns"]["mean_ns"] > 0
    # generated tokens per second over the whole step: batch × new tokens / mean(prefill + decode)
    step_ns = sum(sum(s.phases.values()) for s in result.steps if not s.warmup) / 2
    assert result.tokens_per_s == pytest.approx(2 * 5 / (step_ns / 1e9))


def test_bf16_autocast_runs_on_cpu() -> None:
    result = run_workload(RunConfig(model="char", device="cpu", precision="bf16", warmup=0, steps=1))
    assert result.status == "ok" and len(result.steps) == 1


def test_out_of_memory_is_recorded_not_raised(monkeypatch, tmp_db) -> None:
    calls = {"n": 0}
    real_loss = workloads.loss_fn

    def failing_loss(logits, targets):
        calls["n"] += 1
        if calls["n"] == 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_loss(logits, targets)

    monkeypatch.setattr(workloads, "loss_fn", failing_loss)
    result = run_workload(RunConfig(model="char", device="cpu", warmup=1, steps=3))
    assert result.status == "oom"
    assert "out of memory" in (result.error or "")
    assert len(result.steps) == 2  # the two steps finished before the failure are kept
    save_run(ResultsStore(tmp_db), result)
    row = ResultsStore(tmp_db).runs().iloc[0]
    assert row["status"] == "oom"
    table = results_table([result])
    assert table.loc[0, "status"] == "oom"  # spelled as stored, as `harness runs` says it
    # its one finished measured step (step 1) is shown, as `harness runs` shows it
    assert table.loc[0, "forward mean (ns)"] == result.steps[1].phases["forward"] == row["forward_mean_ns"]


CPU_OOM = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
    "allocate 2048000000000 bytes. Error code 12 (Cannot allocate memory)"
)


def test_cpu_allocator_failure_is_out_of_memory() -> None:
    from harness.core.devices import is_oom

    assert is_oom(RuntimeError(CPU_OOM)) and is_oom(MemoryError()) and is_oom(torch.OutOfMemoryError("x"))
    assert not is_oom(RuntimeError("shape mismatch")) and not is_oom(ValueError("out of memory"))


def test_cpu_out_of_memory_is_recorded() -> None:
    # an embedding of 10**12 rows: the CPU allocator refuses at once, without touching memory
    result = run_workload(RunConfig(model="char", device="cpu", warmup=0, steps=1, vocab_size=10**12))
    assert result.status == "oom" and result.steps == []
    assert (result.error or "").startswith("DefaultCPUAllocator: can't allocate memory: you tried to")
    table = results_table([result])  # no measured step finished: no timings
    assert table.loc[0, "status"] == "oom" and math.isnan(table.loc[0, "forward mean (ns)"])
    assert math.isnan(table.loc[0, "tokens/s"])


@pytest.mark.parametrize("status", ["interrupted", "error", "oom"])
def test_the_run_table_shows_the_measured_steps_a_stopped_run_finished(tmp_db, status: str) -> None:
    """A run stopped after 3 measured steps (Ctrl-C, a failure, out of memory): `run`'s table showed its
    status and blank timings, while `harness runs` and `show` showed the steps it finished; now the same."""
    from test_store import make_result

    result = make_result(f"tiny-{status}")
    result.status, result.error = status, "stopped after 3 of 5 measured steps"
    save_run(ResultsStore(tmp_db), result)
    row = ResultsStore(tmp_db).runs().iloc[0]
    table = results_table([result])
    assert table.loc[0, "status"] == status == row["status"]
    for phase in ("forward", "backward", "optimizer"):
        assert table.loc[0, f"{phase} mean (ns)"] == pytest.approx(row[f"{phase}_mean_ns"])
    assert table.loc[0, "forward mean (ns)"] == 1_000_003  # steps 2, 3 and 4: 1,000,002 to 1,000,004 ns
    assert table.loc[0, "tokens/s"] == row["tokens_per_s"] == 1234.5


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, Terminated], ids=["ctrl-c", "sigterm"])
def test_interruption_keeps_the_steps_measured(monkeypatch, interrupt: type[BaseException]) -> None:
    calls = {"n": 0}
    real_loss = workloads.loss_fn

    def interrupted_loss(logits, targets):
        calls["n"] += 1
        if calls["n"] == 4:  # during the third measured step
            raise interrupt()
        return real_loss(logits, targets)

    monkeypatch.setattr(workloads, "loss_fn", interrupted_loss)
    seen = []
    result = run_workload(RunConfig(model="char", device="cpu", warmup=1, steps=5), on_step=seen.append)
    name = "SIGINT" if interrupt is KeyboardInterrupt else "SIGTERM"
    assert result.status == "interrupted"
    assert result.error == f"interrupted by {name} after 2 of 5 measured steps"
    assert [s.step for s in result.steps] == [0, 1, 2] and seen == result.steps
    assert [p.count for p in phase_stats(measured_steps(result), phases_of(result))] == [2, 2, 2]
    assert result.tokens_per_s is not None and result.tokens_per_s > 0


def test_worker_killed_outright_keeps_the_steps_it_logged(tmp_path) -> None:
    import json
    from dataclasses import asdict

    from harness.core.records import StepRecord
    from harness.execution.worker import read_worker_result, steps_path

    config = RunConfig(model="char", warmup=1, steps=3)
    res = tmp_path / "result.json"
    steps = [StepRecord(0, True, {"forward": 5}), StepRecord(1, False, {"forward": 3})]
    log = "".join(json.dumps(asdict(s)) + "\n" for s in steps) + '{"step": 2, "warm'  # cut mid-write
    steps_path(res).write_text(log)
    result = read_worker_result(config, "char-1", res, -9, "")
    assert result.status == "error" and result.steps == steps
    assert result.error == (
        "worker killed by SIGKILL (often the kernel's out-of-memory killer) after 1 measured step"
    )


@pytest.fixture
def worker_handlers() -> Iterator[None]:
    """SIGINT raising KeyboardInterrupt as in a foreground process (pytest run as a background job has it
    ignored), and both handlers put back after a worker run in this process (it ignores both once it
    writes its result)."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@pytest.mark.usefixtures("worker_handlers")
@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_while_the_interrupted_worker_finishes_keeps_its_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: int
) -> None:
    """nsys passes the first signal to its worker and exits without waiting for it; the supervisor then
    sends what nsys left behind SIGTERM. Raised while the worker finished its interrupted run, that second
    signal threw the steps away ("interrupted by SIGTERM before the first step"); it is dropped now."""
    from harness.execution import runner, worker

    calls = {"n": 0}
    real_loss, real_record = workloads.loss_fn, runner.record_dynamo

    def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        if calls["n"] == 4:  # during the third measured step
            os.kill(os.getpid(), first)
        return real_loss(logits, targets)

    def record(*args: Any) -> None:  # as the run finishes, after its step loop
        os.kill(os.getpid(), signal.SIGTERM)
        real_record(*args)

    monkeypatch.setattr(workloads, "loss_fn", loss)
    monkeypatch.setattr(runner, "record_dynamo", record)
    config = RunConfig(model="char", device="cpu", warmup=1, steps=5)
    cfg, res = tmp_path / "config.json", tmp_path / "result.json"
    worker.write_worker_config(config, "char-1", cfg)
    assert worker.main([str(cfg), str(res)]) == 0
    result = worker.read_worker_result(config, "char-1", res, 0, "")
    assert result.status == "interrupted" and [s.step for s in result.steps] == [0, 1, 2]
    assert result.error == f"interrupted by {signal.Signals(first).name} after 2 of 5 measured steps"


@pytest.mark.usefixtures("worker_handlers")
def test_a_signal_as_the_run_finishes_its_last_step_keeps_its_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal that came after the last step, as the run worked out its figures, escaped the runner and was
    said to have come before the first step, every step measured thrown away."""
    from harness.execution import runner, worker

    real_record = runner.record_dynamo

    def record(*args: Any) -> None:  # after the step loop, as the run finishes
        os.kill(os.getpid(), signal.SIGTERM)
        real_record(*args)

    monkeypatch.setattr(runner, "record_dynamo", record)
    config = RunConfig(model="char", device="cpu", warmup=1, steps=2)
    cfg, res = tmp_path / "config.json", tmp_path / "result.json"
    worker.write_worker_config(config, "char-1", cfg)
    assert worker.main([str(cfg), str(res)]) == 0
    result = worker.read_worker_result(config, "char-1", res, 0, "")
    assert result.status == "interrupted" and [s.step for s in result.steps] == [0, 1, 2]
    assert result.error == "interrupted by SIGTERM after 2 of 2 measured steps"
    assert result.tokens_per_s is not None and result.tokens_per_s > 0


def test_nvtx_detail_attaches_hooks_per_layer() -> None:
    from harness.core.nvtx_ranges import attach_detail_ranges

    model = workloads.build_model(workloads.get_spec("tiny"), attention="math")
    handles = attach_detail_ranges(model, workloads.DETAIL_RANGES)
    # per block: the block, attention, mlp, and the named pieces inside them; pre + post hook each
    names = {n for n, _ in model.named_modules()}
    expected = sum(
        1
        for n in names
        if (n.count(".") == 1 and n.startswith("blocks."))
        or (n.startswith("blocks.") and any(n.endswith("." + s) for s in workloads.DETAIL_RANGES))
    )
    assert expected >= 4 * 5
    assert len(handles) == 2 * expected


def test_a_generate_worker_killed_outright_keeps_the_serving_figures_of_its_steps(tmp_path) -> None:
    """A generate sweep point killed by SIGKILL keeps its steps, and with them its serving figures (TTFT,
    TPOT, tokens/s), as a run interrupted inside its worker does; so does one stopped by the harness."""
    import json
    from dataclasses import asdict

    from harness.core.records import StepRecord
    from harness.execution.worker import read_worker_result, steps_path

    config = RunConfig(model="tiny", mode="generate", batch_size=2, new_tokens=3, warmup=1, steps=5)
    res = tmp_path / "result.json"
    steps = [
        StepRecord(0, True, {"prefill": 900, "decode": 500}, tokens=[250, 250]),
        StepRecord(1, False, {"prefill": 100, "decode": 60}, tokens=[20, 40]),
        StepRecord(2, False, {"prefill": 300, "decode": 100}, tokens=[50, 50]),
    ]
    steps_path(res).write_text("".join(json.dumps(asdict(s)) + "\n" for s in steps))
    for stopped_by, status in ((None, "error"), (2, "interrupted")):
        result = read_worker_result(config, "tiny-1", res, -9, "", stopped_by=stopped_by)
        assert result.status == status and result.steps == steps
        serving = result.extra["serving"]
        assert serving["ttft_ns"]["count"] == 2 and serving["ttft_ns"]["mean_ns"] == 200
        assert serving["tpot_ns"]["count"] == 4 and serving["tpot_ns"]["p50_ns"] == 45
        assert serving["output_tokens_per_s"] == pytest.approx(2 * 3 * 2 / (560 / 1e9))
        assert result.tokens_per_s == pytest.approx(2 * 3 / (280 / 1e9))  # the sweep table's tokens/s
        assert serving["decode_tokens_per_s"] == pytest.approx(2 / (40 / 1e9))
        assert "decode" not in serving  # the decode path: only the worker knew it


def test_a_one_token_generate_worker_killed_outright_reads_as_one_that_finished(tmp_path) -> None:
    """--new-tokens 1 decodes nothing, whether the point finished or was killed: its serving table says
    the decode path as a finished run's does (`none (one new token: …)`), never `—` for one and the words
    for the other; its TPOT and decode tokens/s are missing alike (`—`)."""
    import json
    from dataclasses import asdict

    from harness.core.records import StepRecord
    from harness.execution.worker import read_worker_result, steps_path
    from harness.experiments.run_tables import serving_rows
    from workloads.names import NO_DECODE

    config = RunConfig(model="tiny", mode="generate", batch_size=2, new_tokens=1, warmup=1, steps=5)
    res = tmp_path / "result.json"
    steps = [StepRecord(0, True, {"prefill": 900}), StepRecord(1, False, {"prefill": 100}),
             StepRecord(2, False, {"prefill": 300})]  # fmt: skip
    steps_path(res).write_text("".join(json.dumps(asdict(s)) + "\n" for s in steps))
    result = read_worker_result(config, "tiny-1", res, -9, "")
    assert result.status == "error"
    serving = result.extra["serving"]
    assert serving["decode"] == NO_DECODE
    rows = dict(zip(*serving_rows(serving).to_dict("list").values(), strict=True))
    assert rows["decode"] == NO_DECODE
    assert rows["TPOT mean (ns)"] is None and rows["decode tokens/s"] is None


def test_a_train_worker_killed_outright_keeps_its_tokens_per_s(tmp_path) -> None:
    """A train sweep point killed by SIGKILL keeps its tokens/s (batch × context over the mean measured step),
    as one interrupted inside its worker does; the model's own context where --context-length is not given."""
    import json
    from dataclasses import asdict

    from harness.core.records import StepRecord
    from harness.execution.worker import read_worker_result, steps_path

    steps = [
        StepRecord(0, True, {"forward": 900, "backward": 900, "optimizer": 900}),
        StepRecord(1, False, {"forward": 100, "backward": 200, "optimizer": 100}),
        StepRecord(2, False, {"forward": 200, "backward": 300, "optimizer": 300}),
    ]
    res = tmp_path / "result.json"
    steps_path(res).write_text("".join(json.dumps(asdict(s)) + "\n" for s in steps))
    for config, context in (
        (RunConfig(model="char", batch_size=2, warmup=1, steps=5), 64),
        (RunConfig(model="char", batch_size=2, context_length=16, warmup=1, steps=5), 16),
    ):
        result = read_worker_result(config, "char-1", res, -9, "")
        assert result.status == "error" and result.steps == steps
        assert result.tokens_per_s == pytest.approx(2 * context / (600 / 1e9))
    steps_path(res).write_text(json.dumps(asdict(steps[0])) + "\n")  # warm-up only: nothing measured
    warm_only = read_worker_result(RunConfig(model="char", warmup=1, steps=5), "c", res, -9, "")
    assert warm_only.tokens_per_s is None


@pytest.mark.parametrize(("mode", "context"), [("train", 16), ("generate", 16)])
def test_a_worker_killed_outright_keeps_the_model_it_was_to_build(tmp_path, mode: str, context: int) -> None:
    """A sweep point killed before it wrote its result keeps the model's shape and parameters (from its
    spec), where its row in `runs` and the sweep's table had none: the model the run builds, counted."""
    from dataclasses import asdict

    from harness.execution.worker import read_worker_result

    config = RunConfig(model="tiny", mode=mode, context_length=context, vocab_size=500)
    built = run_workload(RunConfig(model="tiny", mode=mode, context_length=context, vocab_size=500,
                                   device="cpu", steps=1, warmup=0))  # fmt: skip
    killed = read_worker_result(config, "tiny-1", tmp_path / "result.json", -9, "")
    assert killed.status == "error" and killed.model is not None
    assert asdict(killed.model) == asdict(built.model)
    assert (killed.model.d_model, killed.model.num_layers, killed.model.context_length) == (512, 4, context)
    assert killed.model.params == 2 * 500 * 512 + 4 * (4 * 512**2 + 3 * 512 * 1344 + 2 * 512) + 512
    assert read_worker_result(RunConfig(model="nonesuch"), "n-1", tmp_path / "r.json", -9, "").model is None
