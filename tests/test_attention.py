"""The attention benchmark: cells, OOM cells, the table, the store, and `harness attention` as typed."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from harness.cli import app
from harness.core.errors import UsageError
from harness.experiments import attention
from harness.experiments.attention import AttentionConfig, attention_table, run_attention_sweep
from harness.store.results import ResultsStore
from workloads.attention import math_attention, sdpa_attention

runner = CliRunner()
SMALL = AttentionConfig(
    batch_size=2, num_heads=2, head_dims=(8, 16), seq_lens=(16, 64), warmup=1, trials=3, device="cpu"
)


def oom_at(seq_len: int):
    """A factory whose attention runs out of memory (as the CUDA allocator reports it) at one seq_len."""

    def factory(causal: bool):
        def fn(q, k, v):
            if q.size(-2) == seq_len:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
            return sdpa_attention(q, k, v, causal)

        return fn

    return factory


@pytest.fixture(scope="module")
def sweep() -> attention.AttentionSweep:
    return run_attention_sweep(SMALL)


@pytest.mark.parametrize("causal", [True, False])
def test_math_and_sdpa_compute_the_same_attention(causal: bool) -> None:
    q, k, v = torch.randn(3, 2, 2, 24, 8, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(math_attention(q, k, v, causal), sdpa_attention(q, k, v, causal))


def test_every_cell_is_measured_in_sweep_order(sweep: attention.AttentionSweep) -> None:
    cells = [(c.impl, c.head_dim, c.seq_len) for c in sweep.cells]
    assert cells == [(i, h, s) for i in ("math", "sdpa") for h in (8, 16) for s in (16, 64)]
    for c in sweep.cells:
        assert c.status == "ok" and c.error is None and c.compile_ns is None
        assert c.forward_mean_ns > 0 and c.backward_mean_ns > 0
        assert c.forward_std_ns >= 0 and c.backward_std_ns >= 0
    assert sweep.device == "cpu" and sweep.sweep_id.startswith("attn-")
    assert "torch.profiler" in sweep.memory_source


def test_cpu_peak_memory_holds_what_must_be_live(sweep: attention.AttentionSweep) -> None:
    """q, k, v, dout, the output and three input grads are all live at the end: 8 × one input's bytes.
    math also keeps the seq_len² probabilities and builds the scores beside them; sdpa never holds them."""
    b, h = SMALL.batch_size, SMALL.num_heads
    peaks = {(c.impl, c.head_dim, c.seq_len): c.peak_memory_bytes for c in sweep.cells}
    for (impl, head_dim, seq_len), peak in peaks.items():
        one_input = b * h * seq_len * head_dim * 4
        assert peak >= 8 * one_input, impl
        if impl == "math":
            assert peak >= 4 * one_input + 2 * b * h * seq_len * seq_len * 4
    for head_dim in SMALL.head_dims:
        assert peaks[("sdpa", head_dim, 64)] < peaks[("math", head_dim, 64)]


def test_table_shows_ms_columns_in_ns_and_memory_in_mib(sweep: attention.AttentionSweep) -> None:
    table = attention_table(sweep)
    assert list(table.columns) == [
        "impl", "head_dim", "seq_len", "forward mean (ns)", "forward std (ns)", "backward mean (ns)",
        "backward std (ns)", "peak memory (MiB)", "status",
    ]  # fmt: skip
    first = sweep.cells[0]
    assert table.loc[0, "forward mean (ns)"] == first.forward_mean_ns
    assert table.loc[0, "peak memory (MiB)"] == first.peak_memory_bytes / 2**20
    assert set(table["status"]) == {"ok"}


def test_an_oom_cell_is_recorded_and_the_sweep_goes_on(monkeypatch, tmp_db: str) -> None:
    monkeypatch.setitem(attention.FACTORIES, "sdpa", oom_at(16))
    store = ResultsStore(tmp_db)
    config = AttentionConfig(
        batch_size=2, head_dims=(8, 16), seq_lens=(16, 32), impls=("sdpa",), warmup=0, trials=2, device="cpu"
    )
    sweep = run_attention_sweep(config, on_cell=store.save_attention)
    status = {(c.head_dim, c.seq_len): c.status for c in sweep.cells}
    assert status == {(8, 16): "oom", (8, 32): "ok", (16, 16): "oom", (16, 32): "ok"}
    oom = sweep.cells[0]
    assert oom.error == "CUDA out of memory. Tried to allocate 8.00 GiB"
    assert oom.forward_mean_ns is None and oom.peak_memory_bytes is None
    table = attention_table(sweep)
    assert list(table["status"]) == ["oom", "ok", "oom", "ok"]
    assert math.isnan(table.loc[0, "forward mean (ns)"]) and table.loc[1, "forward mean (ns)"] > 0
    rows = store.attention_results(sweep.sweep_id)
    assert list(rows["status"]) == ["oom", "ok", "oom", "ok"]
    assert rows.loc[0, "error"] == oom.error and pd_isna(rows.loc[0, "forward_mean_ns"])
    assert rows.loc[1, "forward_mean_ns"] == sweep.cells[1].forward_mean_ns
    assert rows.loc[1, "peak_memory_bytes"] == sweep.cells[1].peak_memory_bytes
    assert set(rows["sweep_id"]) == {sweep.sweep_id} and set(rows["batch_size"]) == {2}


def pd_isna(value) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


def test_another_failure_is_an_error_cell_not_a_crash(monkeypatch) -> None:
    def broken(causal: bool):
        def fn(q, k, v):
            raise RuntimeError("expected scalar type Float but found Half\nsecond line")

        return fn

    monkeypatch.setitem(attention.FACTORIES, "math", broken)
    config = AttentionConfig(batch_size=1, head_dims=(8,), seq_lens=(8,), warmup=0, trials=1, device="cpu")
    sweep = run_attention_sweep(config)
    assert [(c.impl, c.status) for c in sweep.cells] == [("math", "error"), ("sdpa", "ok")]
    assert sweep.cells[0].error == "expected scalar type Float but found Half"


def test_cli_prints_the_table_and_saves_every_cell(monkeypatch, tmp_db: str) -> None:
    monkeypatch.setitem(attention.FACTORIES, "sdpa", oom_at(32))
    args = ["attention", "--device", "cpu", "--batch", "2", "--head-dims", "8", "--seq-lens", "16,32"]
    result = runner.invoke(app, [*args, "--warmup", "0", "--trials", "2"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "math" in result.stdout and "OOM" in result.stdout and "peak memory" in result.stdout
    flat = " ".join(result.stdout.split())  # notes wrap at the terminal's width
    assert "1 of 4 cells ran out of memory (OOM), the first (sdpa, head_dim 8, seq_len 32)" in flat
    assert "note: batch 2, 1 head, fp32, causal; 2 timed calls after 0 warm-up per cell" in flat
    rows = ResultsStore(tmp_db).attention_results()
    assert list(zip(rows["impl"], rows["seq_len"], rows["status"], strict=True)) == [
        ("math", 16, "ok"), ("math", 32, "ok"), ("sdpa", 16, "ok"), ("sdpa", 32, "oom"),
    ]  # fmt: skip

    result = runner.invoke(app, [*args, "--trials", "1", "--format", "json"], catch_exceptions=False)
    records = json.loads(result.stdout)
    assert [r["status"] for r in records] == ["ok", "ok", "ok", "oom"]
    assert records[0]["forward mean (ns)"] > 0 and records[3]["forward mean (ns)"] is None
    assert len(set(ResultsStore(tmp_db).attention_results()["sweep_id"])) == 2


def test_a_sweep_interrupted_after_one_cell_says_that_cell_is_stored(monkeypatch, tmp_db: str) -> None:
    def interrupted(causal: bool):
        def fn(q, k, v):
            raise KeyboardInterrupt

        return fn

    monkeypatch.setitem(attention.FACTORIES, "sdpa", interrupted)
    args = ["attention", "--device", "cpu", "--batch", "1", "--head-dims", "8", "--seq-lens", "16"]
    result = runner.invoke(app, [*args, "--warmup", "0", "--trials", "1"], catch_exceptions=False)
    assert result.exit_code == 130, result.output
    flat = " ".join(result.stderr.split())
    assert "interrupted by SIGINT after 1 of 2 cells; the cell measured is stored" in flat
    assert len(ResultsStore(tmp_db).attention_results()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--impl", "flash"], "unknown --impl flash; choose from math, sdpa, compiled"),
        (["--impl="], "--impl is empty; choose from math, sdpa, compiled (comma-separated)"),
        (["--impl", ","], "--impl is empty; choose from math, sdpa, compiled (comma-separated)"),
        (["--head-dims", "16,x"], "--head-dims takes positive integers, e.g. 16,32,64,128; got x"),
        (["--seq-lens", "0"], "--seq-lens takes positive integers, e.g. 128,256,512; got 0"),
        (["--seq-lens", ""], "--seq-lens takes positive integers, e.g. 128,256,512; got none"),
        # int() reads digits of any script ('٣' as 3), and a superscript two is str.isdigit
        (["--head-dims", "\u0663"], "--head-dims takes positive integers, e.g. 16,32,64,128; got \u0663"),
        (
            ["--seq-lens", "8,\uff12,\u00b2"],
            "--seq-lens takes positive integers, e.g. 128,256,512; got \uff12, \u00b2",
        ),
        (
            ["--head-dims", "1" * 5000],  # past the 4,300 digits int() reads: no ValueError traceback
            f"--head-dims {'1' * 20}… (5000 digits) is out of range: at most {2**63 - 1}",
        ),
        (["--trials", "0"], "--trials must be a positive number, got 0"),
        (["--warmup", "-1"], "--warmup must be 0 or more, got -1"),
        # past int64: a cell the database cannot store, a seed torch does not take
        (["--batch", str(10**20)], f"--batch {10**20} is out of range: at most {2**63 - 1}"),
        (["--seed", str(2**64)], f"--seed {2**64} is out of range: at most {2**63 - 1}"),
        (
            ["--impl", "math", "--head-dims", "16", "--seq-lens", f"128,{2**63}"],
            f"--seq-lens {2**63} is out of range: at most {2**63 - 1}",
        ),
    ],
)
def test_bad_arguments_are_one_line(tmp_db: str, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["attention", "--device", "cpu", *args], catch_exceptions=False)
    assert result.exit_code == 2
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert lines == [f"error: {message}"]


def test_sizes_past_what_a_tensor_holds_are_refused_before_any_cell(tmp_db: str) -> None:
    """q of 2^40 × 2^20 heads × 1,024 × 1,024 float32 is 2^82 bytes, a tensor torch does not make (Storage
    size calculation overflowed): one line naming the sizes, exit 2, no cell run or stored."""
    args = ["--batch", str(2**40), "--heads", str(2**20), "--head-dims", "1024", "--seq-lens", "16,1024"]
    result = runner.invoke(
        app, ["attention", "--device", "cpu", *args, "--warmup", "0", "--trials", "1"], catch_exceptions=False
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert lines == [
        f"error: --batch {2**40} × --heads {2**20} × --seq-lens 1024 × --head-dims 1024 is too large: q, k "
        f"and v would be 4.84e+24 bytes each (float32 as drawn), past the {2**63 - 1} a tensor can hold; "
        "give smaller sizes"
    ]
    assert ResultsStore(tmp_db).attention_results().empty


def test_a_cell_is_refused_where_a_tensor_it_makes_passes_int64_bytes() -> None:
    """Sizes up to int64 bytes are measured (out of memory is a result); one byte more is refused: q, k and
    v drawn in float32, and the seq_len² scores math and compiled hold in the precision."""
    inputs = {"batch_size": 2**30, "num_heads": 2**30, "head_dims": (1,), "impls": ("sdpa",), "device": "cpu"}
    attention.validate(AttentionConfig(**inputs, seq_lens=(1,)))  # 2^62 bytes each
    with pytest.raises(UsageError, match=r"^--batch 1073741824 × --heads 1073741824 × --seq-lens 2 × "):
        attention.validate(AttentionConfig(**inputs, seq_lens=(1, 2)))  # 2^63 bytes
    s = 2**31 - 1  # s² × 2 bytes fits int64, s² × 4 does not
    scores = {"batch_size": 1, "num_heads": 1, "head_dims": (64,), "seq_lens": (s,), "device": "cpu"}
    attention.validate(AttentionConfig(**scores, impls=("sdpa",)))
    attention.validate(AttentionConfig(**scores, impls=("math", "compiled"), precision="bf16"))
    for impl in ("math", "compiled"):
        with pytest.raises(UsageError) as refused:
            attention.validate(AttentionConfig(**scores, impls=("sdpa", impl)))
        assert str(refused.value) == (
            f"--batch 1 × --heads 1 × --seq-lens {s} is too large for --impl {impl}: its {s}×{s} scores "
            f"would be 1.84e+19 bytes (fp32), past the {2**63 - 1} a tensor can hold; give smaller sizes or "
            "--impl sdpa"
        )


@pytest.mark.slow
def test_compiled_attention_compiles_once_per_cell_and_matches_math() -> None:
    config = AttentionConfig(
        batch_size=1, head_dims=(8,), seq_lens=(16,), impls=("compiled",), warmup=1, trials=2, device="cpu"
    )
    sweep = run_attention_sweep(config)
    (cell,) = sweep.cells
    assert cell.status == "ok", cell.error
    assert cell.compile_ns > cell.forward_mean_ns + cell.backward_mean_ns  # compiling is in the first call
    assert "compile (ns)" in attention_table(sweep).columns
    q, k, v = torch.randn(3, 1, 1, 16, 8, generator=torch.Generator().manual_seed(1))
    compiled = attention.FACTORIES["compiled"](True)
    torch.testing.assert_close(compiled(q, k, v), math_attention(q, k, v))


def test_show_of_a_sweep_id_says_it_is_a_sweep_and_where_it_is_shown(tmp_db: str) -> None:
    args = ["attention", "--device", "cpu", "--batch", "1", "--head-dims", "8", "--seq-lens", "8"]
    args += ["--impl", "math"]
    result = runner.invoke(app, [*args, "--warmup", "0", "--trials", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (sweep_id,) = set(ResultsStore(tmp_db).attention_results()["sweep_id"])
    where = "`harness dashboard --sweep ID` draws it in its attention panel"

    result = runner.invoke(app, ["show", sweep_id])
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        f"error: {sweep_id!r} is an attention sweep (1 cell, `harness attention`), not a run: {where}"
    ]
    result = runner.invoke(app, ["show", "attn-00000000"])
    assert result.exit_code == 2
    no_such = f"error: no run or attention sweep with id 'attn-00000000'; {where}"
    assert result.output.splitlines() == [no_such]
