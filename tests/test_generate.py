"""Generate mode's serving figures: a timed NVTX range per decoded token, TTFT, TPOT, output tokens/s and
the KV cache, in the run's result, its tables (run and show, json and csv), its store and its capture; and
--cuda-graphs refused where it cannot run."""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import workloads
from harness.cli import app
from harness.core import nvtx_ranges
from harness.core.errors import UsageError
from harness.core.records import RunConfig
from harness.execution.checks import validate
from harness.execution.generate import EAGER
from harness.execution.runner import run_workload
from harness.experiments.run_tables import PERCENTILES_LEFT_BLANK, SERVING_TITLE
from harness.store.results import ResultsStore
from workloads.names import DECODE, TOKEN

runner = CliRunner()


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_each_decoded_token_is_timed_and_the_serving_figures_are_drawn_from_them() -> None:
    config = RunConfig(
        model="char", mode="generate", device="cpu", warmup=1, steps=3, new_tokens=6, batch_size=2,
        context_length=33,
    )  # fmt: skip
    result = run_workload(config)
    assert result.status == "ok"
    for s in result.steps:
        assert len(s.tokens) == 5 and all(ns > 0 for ns in s.tokens)
        assert sum(s.tokens) <= s.phases[DECODE]  # each token inside the decode phase
    serving = result.extra["serving"]
    measured = [s for s in result.steps if not s.warmup]
    tokens = [ns for s in measured for ns in s.tokens]
    assert serving["tpot_ns"]["count"] == 3 * 5 == len(tokens)
    assert serving["tpot_ns"]["mean_ns"] == pytest.approx(np.mean(tokens))
    for q in (50, 90):
        assert serving["tpot_ns"][f"p{q}_ns"] == pytest.approx(np.percentile(tokens, q))
    assert serving["tpot_ns"]["p99_ns"] is None  # 15 tokens: a p99 needs 100
    assert serving["tpot_ns"]["min_ns"] == min(tokens) and serving["tpot_ns"]["max_ns"] == max(tokens)
    assert serving["ttft_ns"]["mean_ns"] == pytest.approx(np.mean([s.phases["prefill"] for s in measured]))
    total = sum(s.phases["prefill"] + s.phases["decode"] for s in measured)
    assert serving["output_tokens_per_s"] == pytest.approx(2 * 6 * 3 / (total / 1e9))
    assert serving["output_tokens_per_s"] == pytest.approx(result.tokens_per_s)
    assert serving["decode_tokens_per_s"] == pytest.approx(2 / (np.mean(tokens) / 1e9))
    assert serving["concurrent_sequences"] == 2 and serving["new_tokens"] == 6
    assert serving["decode"] == EAGER
    spec = workloads.get_spec("char")  # 4 layers, 4 heads of 32, a prompt of 33 + 5 fed-back tokens
    assert serving["kv_cache_bytes"] == serving["kv_cache_analytic_bytes"] == 2 * 4 * 2 * 4 * 38 * 32 * 4
    assert serving["kv_cache_analytic_bytes"] == result.extra["memory"]["breakdown"]["kv_cache"]
    assert spec.num_layers == 4 and spec.head_dim == 32


def test_a_token_range_opens_around_each_decoded_token_inside_decode() -> None:
    seen: list[tuple[str, str]] = []
    nvtx_ranges.set_mirror(
        (lambda name: seen.append(("push", name)) or name, lambda n: seen.append(("pop", n)))
    )
    try:
        run_workload(RunConfig(model="char", mode="generate", device="cpu", warmup=0, steps=1, new_tokens=4))
    finally:
        nvtx_ranges.set_mirror(None)
    names = [name for what, name in seen if what == "push"]
    assert names == ["step", "prefill", "decode", TOKEN, TOKEN, TOKEN]
    decode = seen.index(("push", DECODE))
    assert seen[decode:] == [
        ("push", DECODE),
        *[("push", TOKEN), ("pop", TOKEN)] * 3,
        ("pop", DECODE),
        ("pop", "step"),
    ]


def test_run_json_carries_the_serving_figures_and_show_repeats_them(tmp_db: str) -> None:
    args = [
        "--device",
        "cpu",
        "--mode",
        "generate",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--new-tokens",
        "5",
        "-b",
        "2",
    ]
    result = invoke("run", "tiny", *args, "--format", "json")
    assert result.exit_code == 0, result.output
    serving = {row["metric"]: row["value"] for row in json.loads(result.stdout)[SERVING_TITLE]}
    for name in ("TTFT mean (ns)", "TTFT p50 (ns)", "TPOT p50 (ns)", "output tokens/s"):
        assert serving[name] > 0, name
    # 2 measured steps and 8 tokens: too few for a p90 or p99, left blank and said why
    assert serving["TTFT p99 (ns)"] is serving["TPOT p90 (ns)"] is serving["TPOT p99 (ns)"] is None
    assert serving[PERCENTILES_LEFT_BLANK] == (
        "TTFT p99 (2 measured steps), TPOT p90 and p99 (8 tokens): too few samples (needed: p90 10, p99 100)"
    )
    assert serving["TPOT tokens timed"] == 2 * (5 - 1)  # steps × (new tokens − 1): token 0 is prefill's
    assert serving["concurrent sequences (batch)"] == 2 and serving["decode"] == EAGER
    assert serving["KV cache allocated (MiB)"] == serving["KV cache analytic (MiB)"] > 0

    (run_id,) = ResultsStore(tmp_db, readonly=True).runs()["run_id"]
    shown = json.loads(invoke("show", run_id, "--format", "json").stdout)
    assert {row["metric"]: row["value"] for row in shown[SERVING_TITLE]} == serving
    run = ResultsStore(tmp_db, readonly=True).get(run_id)
    kept = run.summary["token_timings"]  # every token's time is stored, warm-up steps' too
    assert [(t["step"], t["warmup"], len(t["durations_ns"])) for t in kept] == [
        (0, True, 4),
        (1, False, 4),
        (2, False, 4),
    ]
    tpot = run.summary["serving"]["tpot_ns"]
    assert tpot["p50_ns"] == pytest.approx(
        np.percentile([ns for t in kept[1:] for ns in t["durations_ns"]], 50)
    )


def test_run_csv_and_the_screen_carry_them(tmp_db: str) -> None:
    args = [
        "--device",
        "cpu",
        "--mode",
        "generate",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--new-tokens",
        "3",
        "-b",
        "1",
    ]
    out = invoke("run", "char", *args, "--format", "csv").stdout
    section = out.split(f"# {SERVING_TITLE}\n")[1].split("\n\n")[0]
    rows = {r["metric"]: r["value"] for r in csv.DictReader(io.StringIO(section))}
    assert (
        float(rows["TPOT p50 (ns)"]) > 0
        and float(rows["TTFT p50 (ns)"]) > 0
        and rows["TTFT p99 (ns)"] == rows["TPOT p99 (ns)"] == ""  # one step, 2 tokens: no tail measured
        and rows["TPOT tokens timed"] == "2"
    )
    assert rows[PERCENTILES_LEFT_BLANK].startswith("TTFT p99 (1 measured step), TPOT p90 and p99 (2 tokens)")
    screen = invoke("run", "char", *args, "--wide").stdout
    assert SERVING_TITLE in screen and "TPOT p99 (ms)" in screen and "TTFT p50 (ms)" in screen


def one_line_error(result) -> str:  # type: ignore[no-untyped-def]
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--mode", "generate", "--device", "cpu"],
            "error: --cuda-graphs needs a CUDA device; this run is on cpu",
        ),
        (["--device", "cpu"], "error: --cuda-graphs replays generate's decode step; --mode train has none"),
        (
            ["--mode", "forward", "--device", "cpu"],
            "error: --cuda-graphs replays generate's decode step; --mode forward",
        ),
    ],
)
def test_cuda_graphs_off_cuda_or_outside_generate_is_one_line(
    tmp_db: str, args: list[str], message: str
) -> None:
    result = invoke("run", "tiny", "--cuda-graphs", *args)
    assert result.exit_code == 2
    assert one_line_error(result).startswith(message)
    assert ResultsStore(tmp_db).count_runs() == 0  # refused before any work


def test_cuda_graphs_refuses_what_a_replay_cannot_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CUDA device (pretended: the check is made before any CUDA call), --compile and --nvtx-detail
    are refused beside --cuda-graphs."""
    import torch

    from harness.execution import checks

    monkeypatch.setattr(checks, "resolve_device", lambda requested: torch.device("cuda"))
    config = RunConfig(model="tiny", mode="generate", device="cuda", cuda_graphs=True)
    validate(config)  # generate on CUDA: taken
    with pytest.raises(UsageError, match="--cuda-graphs and --compile both decode from a static KV cache"):
        validate(RunConfig(model="tiny", mode="generate", device="cuda", cuda_graphs=True, compile=True))
    with pytest.raises(UsageError, match=r"--nvtx-detail puts ranges .* in Python hooks"):
        validate(RunConfig(model="tiny", mode="generate", device="cuda", cuda_graphs=True, nvtx_detail=True))


@pytest.mark.parametrize(("flag", "done"), [("--compile", "compiled"), ("--cuda-graphs", "replayed")])
def test_a_decode_path_for_one_new_token_is_refused_before_any_work(
    tmp_db: str, flag: str, done: str
) -> None:
    # --new-tokens 1 decodes no token: the flag would change nothing, yet the run was stored as compiled
    result = invoke("run", "tiny", "--mode", "generate", "--new-tokens", "1", flag, "--device", "cpu")
    assert result.exit_code == 2
    assert one_line_error(result) == (
        f"error: {flag} applies to generate's decode step, and --new-tokens 1 decodes no token (the first is "
        f"prefill's, eager on every path): nothing would be {done}; leave {flag} out or decode 2 or more"
    )
    assert ResultsStore(tmp_db).count_runs() == 0


def test_optimize_tries_no_decode_path_for_one_new_token() -> None:
    from harness.experiments.changes import CHANGES, NO_DECODE

    one = RunConfig(model="tiny", mode="generate", device="cuda", new_tokens=1)
    assert CHANGES["compile"](one, "cuda") == NO_DECODE
    assert CHANGES["cuda-graphs"](one, "cuda") == NO_DECODE
    two = RunConfig(model="tiny", mode="generate", device="cuda", new_tokens=2)
    assert CHANGES["compile"](two, "cuda").compile and CHANGES["cuda-graphs"](two, "cuda").cuda_graphs


@pytest.mark.slow
def test_compile_decodes_from_the_static_cache() -> None:
    result = run_workload(
        RunConfig(model="char", mode="generate", device="cpu", compile=True, warmup=1, steps=1, new_tokens=4)
    )
    assert result.status == "ok"
    serving = result.extra["serving"]
    assert serving["decode"] == "torch.compile (default)"  # reduce-overhead on CUDA only
    assert (
        serving["tpot_ns"]["count"] == 3 and serving["kv_cache_bytes"] == serving["kv_cache_analytic_bytes"]
    )


@pytest.mark.slow
def test_the_token_ranges_are_in_the_capture(in_tmp: Path) -> None:
    """`run --mode generate --nsys` on the CPU: under each step's decode range, one `token` range per
    decoded token, payload 1 … new_tokens − 1, in the export nsys wrote."""
    args = ["--mode", "generate", "--device", "cpu", "--steps", "1", "--warmup", "1", "--new-tokens", "4"]
    result = runner.invoke(
        app, ["run", "char", *args, "--nsys", "--no-nsys-baseline"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    (export,) = (in_tmp / "nsys_profiles").glob("*.sqlite")
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    columns = {row[1] for row in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
    payload = [c for c in ("int64Value", "uint64Value", "int32Value", "uint32Value") if c in columns]
    named = con.execute(
        f"SELECT coalesce(e.text, s.value), e.start, e.end, coalesce({', '.join(payload)}, NULL) "
        "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId WHERE e.end IS NOT NULL ORDER BY e.start"
    ).fetchall()
    decodes = [r for r in named if r[0] == DECODE]
    tokens = [r for r in named if r[0] == TOKEN]
    assert len(decodes) == 2 and len(tokens) == 2 * 3
    for _, start, end, _ in decodes:
        inside = [t[3] for t in tokens if start <= t[1] and t[2] <= end]
        assert inside == [1, 2, 3]


def test_the_cuda_graphs_body_times_its_static_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    """--cuda-graphs's step on the CPU, its capture left out (the step it would replay runs eagerly):
    prefill into the static cache, a timed `token` range per decoded token, the static cache's bytes."""
    from harness.execution import checks
    from workloads.decode import StaticDecode

    captured: list[StaticDecode] = []
    monkeypatch.setattr(checks, "_check_graphs", lambda config: None)
    monkeypatch.setattr(StaticDecode, "capture", lambda self: captured.append(self))
    config = RunConfig(
        model="tiny",
        mode="generate",
        device="cpu",
        cuda_graphs=True,
        warmup=1,
        steps=2,
        new_tokens=5,
        batch_size=2,
    )
    result = run_workload(config)
    assert result.status == "ok" and len(captured) == 1  # captured once, before the first step
    assert [len(s.tokens) for s in result.steps] == [4, 4, 4]
    assert all(sum(s.tokens) <= s.phases[DECODE] for s in result.steps)
    serving = result.extra["serving"]
    assert serving["tpot_ns"]["count"] == 2 * 4
    assert serving["kv_cache_bytes"] == serving["kv_cache_analytic_bytes"] == captured[0].cache.nbytes
    assert int(captured[0].cache.pos) == 64 + 4  # the last step's prompt and decoded inputs


@pytest.mark.parametrize(
    ("model", "prompt", "new_tokens", "message"),
    [
        ("tiny", 100_000, 32, "tiny holds a context of 128 tokens; prompt 100000 + 32 new tokens is more"),
        ("tiny", 121, 9, "tiny holds a context of 128 tokens; prompt 121 + 9 new tokens is more"),
        ("char", 61, 5, "char has learned positions for 64 tokens; prompt 61 + 5 new tokens is more"),
    ],
)
def test_a_prompt_and_new_tokens_past_the_models_context_are_refused(
    model: str, prompt: int, new_tokens: int, message: str
) -> None:
    """Generate builds the model as named: a prompt and new tokens past its context would grow the KV cache
    and the prefill without a bound (RoPE or learned positions alike); up to the context is taken."""
    with pytest.raises(UsageError, match=re.escape(message)):
        validate(RunConfig(model=model, mode="generate", context_length=prompt, new_tokens=new_tokens))
    context = workloads.get_spec(model).context_length
    validate(RunConfig(model=model, mode="generate", context_length=context - 4, new_tokens=4))


def test_run_refuses_a_generate_past_the_context_in_one_line(tmp_db: str) -> None:
    args = ["--mode", "generate", "--device", "cpu", "--warmup", "0", "--steps", "1", "--batch-size", "1"]
    result = invoke("run", "tiny", *args, "-t", "121", "--new-tokens", "9")
    assert result.exit_code == 2
    assert one_line_error(result) == (
        "error: tiny holds a context of 128 tokens; prompt 121 + 9 new tokens is more: lower "
        "--context-length or --new-tokens"
    )
    assert ResultsStore(tmp_db).count_runs() == 0  # refused before any work


@pytest.mark.parametrize(("model", "new_tokens"), [("tiny", 1), ("tiny", 9), ("char", 5)])
def test_a_generate_writing_exactly_the_models_context_is_taken(model: str, new_tokens: int) -> None:
    """N new tokens from a prompt of P write P + N - 1 positions: the last token is never fed back, so a
    prompt of the whole context with one new token fits, and P + N - 1 = context is the edge."""
    context = workloads.get_spec(model).context_length
    validate(RunConfig(model=model, mode="generate", context_length=context - new_tokens + 1,
                       new_tokens=new_tokens))  # fmt: skip


def test_the_kv_cache_holds_the_positions_generate_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """tiny with a prompt of 16 and 3 new tokens writes 16 + 2 positions, all of them filled by each step;
    the cache allocated and the analytic figure are those 18 positions, not 19."""
    caches: list[Any] = []
    build = workloads.new_cache

    def kept(*args: Any, **kwargs: Any) -> Any:
        caches.append(build(*args, **kwargs))
        return caches[-1]

    config = RunConfig(model="tiny", mode="generate", device="cpu", warmup=0, steps=1, new_tokens=3,
                       batch_size=1, context_length=16)  # fmt: skip
    monkeypatch.setattr(workloads, "new_cache", kept)
    serving = run_workload(config).extra["serving"]
    spec = workloads.get_spec("tiny")
    assert caches[-1].length == caches[-1].max_len == 18  # every position allocated was written
    per_position = 2 * spec.num_layers * spec.num_heads * spec.head_dim * 4
    assert serving["kv_cache_bytes"] == serving["kv_cache_analytic_bytes"] == 18 * per_position


@pytest.mark.slow
def test_sigterm_ends_a_long_generate_and_keeps_it(tmp_db: str) -> None:
    """A generate within its model's context but long (many decoded tokens, many steps), stopped by
    SIGTERM: Python runs the signal's handler between two torch calls, and each is short once the prompt
    fits the context, so the run ends at once, stored as interrupted, exit 143 (not left to kill -9)."""
    import signal
    import subprocess
    import sys
    import threading

    args = [
        "run",
        "tiny",
        "--mode",
        "generate",
        "--device",
        "cpu",
        "-b",
        "1",
        "-t",
        "8",
        "--new-tokens",
        "120",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *args, "--warmup", "0", "--steps", "100000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    guard = threading.Timer(300, proc.kill)  # a hang guard, not a timing
    guard.start()
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # progress lines (not a terminal): the measured steps have started
            if re.search(r" [1-9]\d*/100000 steps", line):
                break
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate()
    finally:
        guard.cancel()
    assert proc.returncode == 143, out + err
    assert re.search(r"interrupted by SIGTERM after \d+ of 100000 measured steps; stored as interrupted", err)
    (run,) = ResultsStore(tmp_db).runs().to_dict("records")
    assert run["status"] == "interrupted"


def test_one_new_token_times_its_prefill_and_no_empty_decode_phase() -> None:
    """`--new-tokens 1` decodes nothing after prefill's token: each step timed an empty decode phase as well
    (0.03 ms on a CPU), which `diff` against a run that decodes read as a +344,033% change."""
    from harness.store.unsaved_check import check_result

    config = RunConfig(model="char", mode="generate", device="cpu", warmup=1, steps=2, new_tokens=1)
    result = run_workload(config)
    assert result.status == "ok"
    assert [sorted(s.phases) for s in result.steps] == [["prefill"]] * 3
    assert all(s.tokens == [] for s in result.steps)
    serving = result.extra["serving"]
    assert serving["tpot_ns"] is None and serving["ttft_ns"]["count"] == 2
    check_result(result)  # a run kept to be saved later is read back as whole: prefill is all its steps time


def test_one_new_token_times_no_tpot_token_and_says_zero() -> None:
    """`--new-tokens 1`: the one token is prefill's (TTFT), so no token is timed per output token: the
    count is 0, where it showed as missing; TPOT's own figures stay empty."""
    from harness.core.records import RunConfig, RunResult, StepRecord
    from harness.execution.generate import serving_figures
    from harness.experiments.run_tables import serving_rows

    config = RunConfig(model="tiny", mode="generate", new_tokens=1, batch_size=2, device="cpu")
    steps = [StepRecord(i, i == 0, {"prefill": 2_000_000 + i, "decode": 1_000}) for i in range(3)]
    serving = serving_figures(RunResult("gen-1", config, "ok", steps=steps), {"decode": EAGER})
    assert serving is not None and serving["tpot_ns"] is None
    rows = dict(zip(*serving_rows(serving).to_dict("list").values(), strict=True))
    assert rows["TPOT tokens timed"] == 0 and rows["TPOT mean (ns)"] is None
    assert rows["TTFT mean (ns)"] == 2_000_001.5 and rows["output tokens/s"] == 2 * 1 * 2 / (4_002_003 / 1e9)


def test_one_new_token_says_no_token_is_decoded() -> None:
    """`--new-tokens 1`: prefill chooses the one token and nothing is decoded, where the serving table said
    `decode: eager (growing KV cache)`; a run that decodes keeps its path."""
    from harness.experiments.run_tables import serving_rows
    from workloads.names import NO_DECODE

    def decode_row(new_tokens: int) -> object:
        config = RunConfig(model="char", mode="generate", device="cpu", warmup=0, steps=1,
                           new_tokens=new_tokens, batch_size=1)  # fmt: skip
        rows = serving_rows(run_workload(config).extra["serving"]).to_dict("list")
        return dict(zip(*rows.values(), strict=True))["decode"]

    assert decode_row(1) == NO_DECODE == "none (one new token: prefill's)"
    assert decode_row(2) == EAGER


def test_the_help_says_the_default_prompt_is_at_most_half_the_models_context() -> None:
    """char holds a context of 64: its default prompt is 32 tokens, where the help said "prompt of 64"."""
    from harness.cli.options import ContextOpt
    from harness.execution.generate import prompt_length

    (option,) = ContextOpt.__metadata__
    assert option.help == "Default: the model's (generate: a prompt of 64, at most half the model's)."
    assert prompt_length(RunConfig(model="char", mode="generate"), workloads.get_spec("char")) == 32
    assert prompt_length(RunConfig(model="tiny", mode="generate"), workloads.get_spec("tiny")) == 64


def test_flops_per_step_is_a_whole_number_in_csv_and_json(tmp_db: str) -> None:
    """The analytic FLOPs of a step are a count: run's csv wrote `FLOPs per step,140705792.0`."""
    from harness.core.records import RunResult
    from harness.experiments.run_tables import throughput_table

    result = RunResult(
        "tiny-flops", RunConfig(model="tiny", mode="generate"), "ok", flops_per_step=140705792.0
    )
    value = throughput_table(result).set_index("metric").loc["FLOPs per step", "value"]
    assert value == 140_705_792 and isinstance(value, int)
    args = ["--device", "cpu", "--mode", "generate", "--steps", "1", "--warmup", "0", "-t", "4", "-b", "1"]
    out = invoke("run", "char", *args, "--new-tokens", "2", "--format", "csv").stdout
    (line,) = [line for line in out.splitlines() if line.startswith("FLOPs per step,")]
    assert line.removeprefix("FLOPs per step,").isdigit(), line
    shown = json.loads(invoke("run", "char", *args, "--new-tokens", "2", "--format", "json").stdout)
    flops = {row["metric"]: row["value"] for row in shown["throughput"]}["FLOPs per step"]
    assert isinstance(flops, int) and flops > 0
