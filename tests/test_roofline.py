"""workloads.roofline (FLOPs and bytes per sub-block), the device roofs, analysis.runs.roofline and the
command."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import typer
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count
from typer.testing import CliRunner

import workloads
from analysis.dashboard.roofline import roofline_figure
from analysis.runs.roofline import TABLE_COLUMNS, Roofs, mfu_table, model_flops, roofline_table
from harness.cli import roofline as roofline_command
from harness.experiments.roofline import measure_roofs, table_roofs
from workloads import flops, peak
from workloads.peak import peak_bandwidth, peak_flops
from workloads.roofline import MATMUL_SUBBLOCKS, param_count, phase_flops, subblock_costs
from workloads.specs import ModelSpec

B, T = 2, 32


# One model of each family, small enough to build in a second: a 2-layer TransformerLM (RMSNorm, RoPE,
# SwiGLU, untied head) and nanoGPT's char model (GPT-2: LayerNorm, biases, GELU, tied head).
SPECS = {
    "transformer": ModelSpec("transformer-2l", "transformer", 128, 336, 2, 4, 500, 64),
    "gpt2": workloads.get_spec("char"),
}


@pytest.fixture(scope="module")
def models() -> dict[str, torch.nn.Module]:
    return {name: workloads.build_model(spec, attention="math", seed=0) for name, spec in SPECS.items()}


def costs_of(frame: pd.DataFrame) -> dict[tuple[str, str], int]:
    return {(r["sub-block"], r["pass"]): r["flops"] for _, r in frame.iterrows()}


def counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def forward_backward(module: torch.nn.Module, *inputs: torch.Tensor) -> tuple[int, int]:
    """FLOPs FlopCounterMode counts for `module` on leaf inputs that need gradients: forward, backward."""
    leaves = [x.detach().requires_grad_(True) for x in inputs]
    out: list[torch.Tensor] = []
    fwd = counted(lambda: out.append(module(*leaves)))
    bwd = counted(lambda: out[0].backward(torch.ones_like(out[0])))
    return fwd, bwd


# --- FLOPs: the matmul sub-blocks equal FlopCounterMode's count -----------------------------------------


@pytest.mark.parametrize("name", ["transformer", "gpt2"])
def test_each_matmul_subblock_matches_the_flop_counter(models, name: str) -> None:
    model = models[name]
    spec, layers = model.spec, model.spec.num_layers
    costs = costs_of(subblock_costs(spec, B, T, "fp32", "train", attention="math"))
    block = model.blocks[0]
    d, h, hd = spec.d_model, spec.num_heads, spec.head_dim
    x = torch.randn(B, T, d)
    q, k, v, p = (torch.randn(B, h, T, hd), torch.randn(B, h, T, hd), torch.randn(B, h, T, hd),
                  torch.randn(B, h, T, T))  # fmt: skip
    per_layer = {
        "qkv_proj": forward_backward(block.attn.qkv, x),
        "qk_scores": forward_backward(block.attn.scores, q, k),
        "attn_v": forward_backward(block.attn.context, p, v),
        "out_proj": forward_backward(block.attn.out, x),
        "mlp_up": forward_backward(block.mlp.up, x),
        "mlp_down": forward_backward(block.mlp.down, torch.randn(B, T, spec.d_ff)),
    }
    for sub, (fwd, bwd) in per_layer.items():
        assert costs[sub, "forward"] == layers * fwd, sub
        assert costs[sub, "backward"] == layers * bwd, sub
    assert (costs["lm_head", "forward"], costs["lm_head", "backward"]) == forward_backward(model.lm_head, x)


@pytest.mark.parametrize("name", ["transformer", "gpt2"])
def test_matmul_subblocks_add_up_to_the_whole_model(models, name: str) -> None:
    model = models[name]
    spec = model.spec
    x, y = workloads.synthetic_batch(spec, B, T)
    costs = subblock_costs(spec, B, T, "fp32", "train")
    matmul = costs[costs["kind"] == "matmul"]
    loss: list[torch.Tensor] = []
    forward = counted(lambda: loss.append(workloads.loss_fn(model(x), y)))
    backward = counted(lambda: loss[0].backward())
    model.zero_grad(set_to_none=True)
    assert matmul.loc[matmul["pass"] == "forward", "flops"].sum() == forward
    assert matmul.loc[matmul["pass"] == "backward", "flops"].sum() == backward
    assert phase_flops(costs) == {"forward": forward, "backward": backward}
    assert forward == flops.forward_flops(spec, B, T)


def test_fused_attention_is_counted_as_the_flop_counter_counts_its_kernels() -> None:
    # FlopCounterMode's formulas for the CUDA flash / efficient / cuDNN kernels (the CPU kernel has none)
    spec = workloads.get_spec("tiny")
    costs = costs_of(subblock_costs(spec, B, T, "bf16", "train", attention="sdpa"))
    q = (B, spec.num_heads, T, spec.head_dim)
    assert costs["sdpa", "forward"] == spec.num_layers * sdpa_flop_count(q, q, q)
    assert costs["sdpa", "backward"] == spec.num_layers * sdpa_backward_flop_count(q, q, q, q)
    assert ("qk_scores", "forward") not in costs


def test_elementwise_subblocks_have_their_analytic_counts() -> None:
    # not checked against FlopCounterMode, which counts matmuls only; the per-element rules are in the docs
    spec = ModelSpec("t", "transformer", 8, 12, 1, 2, 16, 4)
    c = costs_of(subblock_costs(spec, 2, 4, "fp32", "train"))
    n, d, f, scores = 8, 8, 12, 2 * 2 * 4 * 4
    assert c["norm", "forward"] == 3 * 4 * n * d  # 3 RMSNorms × (square, sum, scale, weight)
    assert c["softmax", "forward"] == 5 * scores  # max, subtract, exp, sum, divide
    assert c["mlp_act", "forward"] == 6 * n * f  # sigmoid (4), × a, × b
    assert c["residual", "forward"] == 2 * n * d
    assert c["loss", "forward"] == 4 * n * 16 + 3 * n
    assert c["optimizer", "optimizer"] == 14 * param_count(spec)


@pytest.mark.parametrize("name", ["transformer", "gpt2"])
def test_parameter_count_matches_the_built_model(models, name: str) -> None:
    assert param_count(models[name].spec) == workloads.count_params(models[name])


# --- bytes: a hand count on one small configuration -----------------------------------------------------


def test_minimum_bytes_by_hand_on_a_small_transformer() -> None:
    """d_model 8, d_ff 12, 1 layer, 2 heads (head_dim 4), vocabulary 16; batch 2 × context 4; fp32 (4 B).

    N = 8 tokens, N·d = 64 activations, N·d_ff = 96, B·H·T·T = 64 scores, N·V = 128 logits.
    """
    spec = ModelSpec("hand", "transformer", 8, 12, 1, 2, 16, 4)
    got = {(r["sub-block"], r["pass"]): r["bytes"] for _, r in subblock_costs(spec, 2, 4, "fp32").iterrows()}
    by_hand = {
        # ids 8×8 B; read 64 rows' values, write 64 values
        ("embedding", "forward"): 8 * 8 + (64 + 64) * 4,
        # ids; read dX (64); write the dense table gradient (16 × 8)
        ("embedding", "backward"): 8 * 8 + (64 + 128) * 4,
        # 3 RMSNorms: read x (64), write y (64), read the weight (8)
        ("norm", "forward"): 3 * (64 + 64 + 8) * 4,
        # read x, dy (64 each), write dx (64), read w (8), write dw (8)
        ("norm", "backward"): 3 * (64 * 3 + 8 + 8) * 4,
        # x (64) + W (8 × 24) in, y (8 × 24) out
        ("qkv_proj", "forward"): (64 + 192 + 192) * 4,
        # dX = dY·W: dY (192) + W (192) in, dX (64) out; dW = dYᵀ·X: X (64) + dY (192) in, dW (192) out
        ("qkv_proj", "backward"): (192 + 192 + 64 + 64 + 192 + 192) * 4,
        # q and k (64 each) in and out, plus the fp32 cos and sin tables (4 positions × 2 each)
        ("rope", "forward"): (128 + 128) * 4 + 2 * 4 * 2 * 4,
        ("rope", "backward"): (128 + 128) * 4 + 2 * 4 * 2 * 4,
        # Q, K (64 each) in, scores (64) out
        ("qk_scores", "forward"): (64 + 64 + 64) * 4,
        # dQ = dS·K: dS + K in, dQ out; dK = dSᵀ·Q: dS + Q in, dK out
        ("qk_scores", "backward"): (64 + 64 + 64 + 64 + 64 + 64) * 4,
        ("softmax", "forward"): (64 + 64) * 4,  # S in, P out
        ("softmax", "backward"): (64 + 64 + 64) * 4,  # P, dP in, dS out
        ("attn_v", "forward"): (64 + 64 + 64) * 4,  # P, V in, O out
        ("attn_v", "backward"): (64 + 64 + 64 + 64 + 64 + 64) * 4,  # dP = dO·Vᵀ; dV = Pᵀ·dO
        ("out_proj", "forward"): (64 + 64 + 64) * 4,  # x, W (8 × 8) in, y out
        ("out_proj", "backward"): (64 + 64 + 64 + 64 + 64 + 64) * 4,
        ("mlp_up", "forward"): (64 + 192 + 192) * 4,  # fused up projection to 2 × 12
        ("mlp_up", "backward"): (192 + 192 + 64 + 64 + 192 + 192) * 4,
        ("mlp_act", "forward"): (96 + 96 + 96) * 4,  # a, b in, silu(a)·b out
        ("mlp_act", "backward"): (96 * 3 + 96 * 2) * 4,  # a, b, dy in; da, db out
        ("mlp_down", "forward"): (96 + 96 + 64) * 4,  # x (8 × 12), W (12 × 8) in, y out
        ("mlp_down", "backward"): (64 + 96 + 96 + 96 + 64 + 96) * 4,
        ("residual", "forward"): 2 * (64 + 64 + 64) * 4,  # two adds: two in, one out
        ("residual", "backward"): 2 * (64 + 64 + 64) * 4,
        ("lm_head", "forward"): (64 + 128 + 128) * 4,  # x, W (16 × 8) in, logits out
        ("lm_head", "backward"): (128 + 128 + 64 + 64 + 128 + 128) * 4,
        # logits in; targets (8 B) and the fp32 log-sum-exp per token; the fp32 loss out
        ("loss", "forward"): 128 * 4 + 8 * (8 + 4) + 4,
        # logits, targets, log-sum-exp in; dlogits out
        ("loss", "backward"): 128 * 4 + 8 * (8 + 4) + 128 * 4,
        # 824 parameters (embedding 128, attention 256, MLP 288, 3 norms 24, head 128); AdamW reads p, g, m, v
        # and writes p, m, v in fp32
        ("optimizer", "optimizer"): 824 * 7 * 4,
    }
    assert got == by_hand


def test_bf16_halves_activation_and_weight_bytes_but_not_the_optimizer_state() -> None:
    spec = ModelSpec("hand", "transformer", 8, 12, 1, 2, 16, 4)
    fp32 = subblock_costs(spec, 2, 4, "fp32").set_index(["sub-block", "pass"])["bytes"]
    bf16 = subblock_costs(spec, 2, 4, "bf16").set_index(["sub-block", "pass"])["bytes"]
    assert bf16["qkv_proj", "forward"] * 2 == fp32["qkv_proj", "forward"]
    assert bf16["optimizer", "optimizer"] == fp32["optimizer", "optimizer"]


def test_gpt2_adds_positions_biases_and_layernorm_bytes() -> None:
    spec = ModelSpec("hand2", "gpt2", 8, 32, 1, 2, 16, 4)
    got = subblock_costs(spec, 2, 4, "fp32").set_index(["sub-block", "pass"])["bytes"]
    assert got["embedding", "forward"] == 8 * 8 + (64 + 64 + 4 * 8) * 4  # + the 4 position rows
    assert got["norm", "forward"] == 3 * (64 + 64 + 16) * 4  # weight and bias
    assert got["qkv_proj", "forward"] == (64 + 192 + 192 + 24) * 4  # + the bias
    assert got["mlp_act", "forward"] == (2 * 8 * 32) * 4  # GELU: x in, y out
    assert ("rope", "forward") not in got


def test_forward_mode_and_bad_arguments() -> None:
    spec = workloads.get_spec("char")
    fwd = subblock_costs(spec, 2, 16, "fp16", "forward", attention="sdpa")
    assert set(fwd["pass"]) == {"forward"} and "loss" not in set(fwd["sub-block"])
    assert (fwd["intensity"] == fwd["flops"] / fwd["bytes"]).all()
    assert set(fwd.loc[fwd["kind"] == "matmul", "sub-block"]) <= MATMUL_SUBBLOCKS
    for kwargs, match in (
        ({"precision": "fp8"}, "precision"),
        ({"mode": "serve"}, "mode"),
        ({"attention": "flash"}, "attention"),
    ):
        with pytest.raises(ValueError, match=match):
            subblock_costs(spec, 2, 16, **kwargs)
    with pytest.raises(ValueError, match="positive"):
        subblock_costs(spec, 0, 16)


# --- device roofs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "bandwidth"),
    [
        ("NVIDIA H100 80GB HBM3", 3.35e12),
        ("NVIDIA H100 PCIe", 2.0e12),
        ("NVIDIA H100 NVL", 3.9e12),
        ("NVIDIA H200", 4.8e12),
        ("NVIDIA H200 NVL", 4.8e12),
        ("NVIDIA A100-SXM4-80GB", 2.039e12),
        ("NVIDIA A100 80GB PCIe", 1.935e12),
        ("NVIDIA A100-SXM4-40GB", 1.555e12),
        ("NVIDIA A100-PCIE-40GB", 1.555e12),
        ("NVIDIA L40S", 864e9),
        ("NVIDIA L4", 300e9),
        ("NVIDIA GeForce RTX 4090", 1008e9),
        ("NVIDIA GeForce RTX 5090", 1792e9),
        ("AMD EPYC 7763 64-Core Processor", None),
    ],
)
def test_datasheet_bandwidth_by_device_name(name: str, bandwidth: float | None) -> None:
    assert peak_bandwidth(name) == bandwidth


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA RTX A1000 Laptop GPU",  # not an A100: 6.7 TFLOP/s fp32, 192 GB/s
        "Quadro GV100",  # not a V100: 870 GB/s
        "NVIDIA GH200 480GB",  # an H100 chip with its own memory, not an H200
        "NVIDIA A100X",
        "NVIDIA GeForce RTX 4090 D",  # fewer SMs than the RTX 4090
        "NVIDIA GeForce RTX 4090 Laptop GPU",  # another chip: 576 GB/s
        "NVIDIA GeForce RTX 5090 Laptop GPU",
    ],
)
def test_a_name_containing_a_known_gpus_is_not_that_gpu(name: str) -> None:
    assert peak_bandwidth(name) is None
    assert peak_flops(name, "fp32") is None
    assert table_roofs(name, "bf16") is None


def test_every_datasheet_name_is_the_gpu_it_names() -> None:
    """A name --gpu takes finds its own entry of the table, not one listed before it."""
    for gpu in peak.GPUS:
        for name in gpu.names:
            assert peak.gpu(name) is gpu, name


def test_l40s_peaks_are_its_own_not_the_l4s() -> None:
    assert peak_flops("NVIDIA L40S", "bf16") == 362.05e12
    assert peak_flops("NVIDIA L40S", "fp32") == 91.6e12
    assert peak_flops("NVIDIA L4", "bf16") == 121e12


def test_table_roofs() -> None:
    roofs = table_roofs("NVIDIA H100 80GB HBM3", "bf16")
    assert roofs == Roofs("NVIDIA H100 80GB HBM3, datasheet, bf16", 989e12, 3.35e12)
    assert roofs.ridge == pytest.approx(295.2, abs=0.1)
    assert table_roofs("Intel(R) Xeon(R)", "fp32") is None


def test_measured_cpu_roofs_are_real_positive_rates() -> None:
    roofs = measure_roofs(torch.device("cpu"), "bf16", matmul_n=128, copy_bytes=1 << 20, repeats=2)
    assert "measured: fp32 matmul 128×128, copy 1 MiB" in roofs.label  # a CPU measures fp32
    assert roofs.peak_flops is not None and math.isfinite(roofs.peak_flops) and roofs.peak_flops > 1e6
    assert roofs.bandwidth is not None and math.isfinite(roofs.bandwidth) and roofs.bandwidth > 1e6


# --- the roofline table and MFU -------------------------------------------------------------------------


def small_costs() -> pd.DataFrame:
    return pd.DataFrame(
        {"sub-block": ["mlp_up", "softmax", "optimizer"], "pass": ["forward", "forward", "optimizer"],
         "kind": ["matmul", "elementwise", "elementwise"], "flops": [2e12, 1e9, 1e9],
         "bytes": [1e10, 2e9, 4e9], "intensity": [200.0, 0.5, 0.25]}
    )  # fmt: skip


def test_roofline_table_places_each_subblock() -> None:
    roofs = Roofs("test", peak_flops=100e12, bandwidth=1e12)  # ridge at 100 FLOP/byte
    times = {("mlp_up", "forward"): 40e6, ("softmax", "forward"): 4e6}  # ns
    table = roofline_table(small_costs(), times, roofs).set_index("sub-block")
    assert list(table.reset_index().columns) == TABLE_COLUMNS
    assert table.loc["mlp_up", "bound"] == "compute" and table.loc["softmax", "bound"] == "memory"
    assert table.loc["mlp_up", "attainable TFLOP/s"] == 100.0
    assert table.loc["softmax", "attainable TFLOP/s"] == 0.5  # 1 TB/s × 0.5 FLOP/byte
    assert table.loc["mlp_up", "roofline time (ns)"] == pytest.approx(20e6)  # 2e12 / 1e14 s
    assert table.loc["softmax", "roofline time (ns)"] == pytest.approx(2e6)  # 2e9 bytes / 1e12 B/s
    assert table.loc["mlp_up", "achieved TFLOP/s"] == pytest.approx(50.0)
    assert table.loc["mlp_up", "achieved GB/s"] == pytest.approx(250.0)
    assert table.loc["mlp_up", "of roof (%)"] == pytest.approx(50.0)
    assert table.loc["softmax", "of roof (%)"] == pytest.approx(50.0)  # 0.25 of 0.5 TFLOP/s
    assert math.isnan(table.loc["optimizer", "time (ns)"])  # no time: nothing made up
    assert math.isnan(table.loc["optimizer", "of roof (%)"])


def test_a_subblock_without_flops_has_its_share_of_the_memory_roof() -> None:
    costs = subblock_costs(workloads.get_spec("tiny"), 4, 128, "fp32", "train")
    embedding = costs[(costs["sub-block"] == "embedding") & (costs["pass"] == "forward")].iloc[0]
    assert embedding["flops"] == 0  # a gather: bytes only
    roofs = Roofs("test", peak_flops=100e12, bandwidth=1e12)
    ns = embedding["bytes"] / 1e12 * 1e9 * 4  # a quarter of the bandwidth
    table = roofline_table(costs, {("embedding", "forward"): ns}, roofs).set_index(["sub-block", "pass"])
    row = table.loc[("embedding", "forward")]
    assert row["bound"] == "memory" and row["achieved GB/s"] == pytest.approx(250.0)
    assert row["of roof (%)"] == pytest.approx(25.0)
    assert math.isnan(table.loc[("embedding", "backward"), "of roof (%)"])  # no time: nothing made up


def test_times_plug_in_as_a_frame_and_roofs_may_be_unknown() -> None:
    times = pd.DataFrame({"sub-block": ["mlp_up"], "pass": ["forward"], "time_ns": [40e6]})
    table = roofline_table(small_costs(), times, None).set_index("sub-block")
    assert table.loc["mlp_up", "achieved TFLOP/s"] == pytest.approx(50.0)
    assert table["bound"].isna().all() and table["attainable TFLOP/s"].isna().all()


@pytest.mark.parametrize("attention", ["math", "sdpa"])
def test_model_flops_equal_the_runs_mfu_count(attention: str) -> None:
    spec = workloads.get_spec("small")
    costs = subblock_costs(spec, 4, 128, "bf16", "train", attention=attention)
    per_phase = model_flops(costs)
    assert per_phase["optimizer"] == 0
    assert per_phase["forward"] + per_phase["backward"] == flops.train_flops(spec, 4, 128)


def test_mfu_per_phase_and_step() -> None:
    spec = workloads.get_spec("tiny")
    costs = subblock_costs(spec, 8, 128, "bf16", "train")
    fwd = flops.forward_flops(spec, 8, 128)
    table = mfu_table(costs, {"forward": 1e6, "backward": 2e6, "optimizer": 1e6}, 1e15).set_index("phase")
    assert table.loc["forward", "MFU (%)"] == pytest.approx(fwd / 1e-3 / 1e15 * 100)
    assert table.loc["backward", "achieved TFLOP/s"] == pytest.approx(2 * fwd / 2e-3 / 1e12)
    assert table.loc["optimizer", "MFU (%)"] == 0
    assert table.loc["step", "flops"] == 3 * fwd and table.loc["step", "time (ns)"] == 4e6
    assert mfu_table(costs, {"forward": 1e6}, None)["MFU (%)"].isna().all()


def test_roofline_figure_draws_the_roof_and_the_points() -> None:
    roofs = Roofs("test", peak_flops=100e12, bandwidth=1e12)
    fig = roofline_figure(roofline_table(small_costs(), {("mlp_up", "forward"): 40e6}, roofs), roofs)
    roof, *points = fig.data
    assert list(roof.y) == pytest.approx([np.min(roof.x), 100.0, 100.0])  # bandwidth × x, then flat
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    filled = [p for p in points if p.marker.symbol == "circle"]
    assert [list(p.text) for p in filled] == [["mlp_up"]] and list(filled[0].y) == [50.0]


# --- the command ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False)
    app.callback()(lambda: None)
    roofline_command.register(app)
    return app


def test_command_prints_the_analytic_table(app: typer.Typer) -> None:
    args = ["roofline", "--model", "tiny", "--batch-size", "8", "--context-length", "256",
            "--precision", "fp32", "--device", "cpu", "--format", "json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    tables = json.loads(result.stdout)
    rows = next(v for k, v in tables.items() if k.startswith("sub-blocks"))
    # tiny: d = 512, f = 1344, L = 4 layers, h = 16 heads, V = 10,000; n = 8 × 256 = 2,048 tokens, so
    # nd = n·d = 1,048,576 and one layer's attention matrix has 8·16·256² = 8,388,608 elements (A).
    # A linear n×i → n×o is 2·n·i·o, its backward twice that; attention's products are 2·b·t²·d per layer.
    # Parameters (optimizer, 14 FLOPs each): 2·V·d + L·(4d² + 3·d·f + 2d) + d = 22,696,448.
    forward = [
        ("embedding", 0),  # a gather
        ("norm", 37_748_736),  # (2L + 1) RMSNorms × 4 per element × nd
        ("qkv_proj", 12_884_901_888),  # L × 2·n·d·3d
        ("rope", 25_165_824),  # L × 3 per element × 2nd (q and k)
        ("qk_scores", 2_147_483_648),  # L × 2·8·256²·512
        ("softmax", 167_772_160),  # L × 5 × A
        ("attn_v", 2_147_483_648),  # as qk_scores
        ("out_proj", 4_294_967_296),  # L × 2·n·d·d
        ("mlp_up", 22_548_578_304),  # L × 2·n·d·2f (SwiGLU's two halves at once)
        ("mlp_act", 66_060_288),  # L × 6 × n·f
        ("mlp_down", 11_274_289_152),  # L × 2·n·f·d
        ("residual", 8_388_608),  # 2L × nd
        ("lm_head", 20_971_520_000),  # 2·n·d·V
        ("loss", 81_926_144),  # 4 per logit × n·V + 3n
    ]
    backward = [
        ("embedding", 1_048_576),  # nd, the scatter into the table's gradient
        ("norm", 84_934_656),  # (2L + 1) × 9 × nd
        ("qkv_proj", 25_769_803_776),  # twice forward (input and weight gradients), as every matmul
        ("rope", 25_165_824),  # as forward
        ("qk_scores", 4_294_967_296),
        ("softmax", 134_217_728),  # L × 4 × A
        ("attn_v", 4_294_967_296),
        ("out_proj", 8_589_934_592),
        ("mlp_up", 45_097_156_608),
        ("mlp_act", 132_120_576),  # L × 12 × n·f
        ("mlp_down", 22_548_578_304),
        ("residual", 8_388_608),  # as forward
        ("lm_head", 41_943_040_000),
        ("loss", 61_442_048),  # 3 per logit × n·V + n
    ]
    expected = [(name, "forward", f) for name, f in forward] + [(name, "backward", f) for name, f in backward]
    expected.append(("optimizer", "optimizer", 317_750_272))  # 14 × 22,696,448
    assert [(r["sub-block"], r["pass"], r["flops"]) for r in rows] == expected
    assert "no roofs for" in result.stderr and "--measure" in result.stderr


def test_command_places_against_a_named_gpu_and_writes_html(app: typer.Typer, tmp_path: Path) -> None:
    html = tmp_path / "roofline.html"
    args = ["roofline", "--model", "char", "--precision", "bf16", "--gpu", "H100", "--format", "csv",
            "--html", str(html)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    sections = result.stdout.split("\n\n")
    roofs = pd.read_csv(io.StringIO(sections[0]), comment="#")
    assert roofs.loc[0, "peak TFLOP/s"] == 989 and roofs.loc[0, "bandwidth GB/s"] == 3350
    blocks = pd.read_csv(io.StringIO(sections[1]), comment="#").set_index(["sub-block", "pass"])
    assert blocks.loc[("lm_head", "forward"), "bound"] == "memory"  # char's 65-token vocabulary
    assert html.read_text().count("plotly") > 0


@pytest.mark.parametrize(
    ("given", "label", "peak"),
    [("rtx4090", "RTX 4090", 165.2), ("a100", "A100", 312), ("h100-pcie", "H100 PCIe", 756),
     ("RTX 4090", "RTX 4090", 165.2), ("a100-80gb-pcie", "A100 80GB PCIe", 312)],
)  # fmt: skip
def test_a_named_gpu_is_matched_whatever_its_spelling_and_labelled_by_its_datasheet(
    app: typer.Typer, given: str, label: str, peak: float
) -> None:
    """--gpu matches the datasheet table ignoring case, spaces and dashes, and the roof is named as the
    datasheet names the GPU, not as it was typed."""
    args = ["roofline", "--model", "char", "--precision", "bf16", "--gpu", given, "--format", "csv"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    roofs = pd.read_csv(io.StringIO(result.stdout.split("\n\n")[0]), comment="#")
    assert roofs.loc[0, "roofs"] == f"{label}, datasheet, bf16"
    assert roofs.loc[0, "peak TFLOP/s"] == peak


def test_html_into_a_new_folder_writes_the_page(app: typer.Typer, tmp_path: Path) -> None:
    """--html in a folder not made yet makes it, as dashboard --out and diff --html do; it failed after the
    tables, naming a temporary file the user never gave."""
    html = tmp_path / "new" / "deeper" / "roofline.html"
    result = CliRunner().invoke(app, ["roofline", "--model", "char", "--gpu", "H100", "--html", str(html)])
    assert result.exit_code == 0, result.output
    assert html.read_text().count("plotly") > 0
    assert ".part" not in result.output


def test_html_that_cannot_be_written_says_why_in_one_line(app: typer.Typer, tmp_path: Path) -> None:
    """A file standing where the folder must be: one line naming it, not the temporary file's name."""
    (tmp_path / "taken").write_text("mine")
    html = tmp_path / "taken" / "roofline.html"
    from harness.cli import app as cli  # the command line as run: its errors are one line

    result = CliRunner().invoke(cli, ["roofline", "--model", "char", "--gpu", "H100", "--html", str(html)])
    assert result.exit_code == 2
    assert f"cannot write {html}: {tmp_path / 'taken'} is a file, not a folder" in result.stderr
    assert ".part" not in result.output and "Traceback" not in result.output
    assert (tmp_path / "taken").read_text() == "mine"


@pytest.mark.parametrize("by_env", [False, True])
def test_html_never_replaces_the_results_database(
    app: typer.Typer, tmp_db: str, monkeypatch: pytest.MonkeyPatch, by_env: bool
) -> None:
    """Without RUN the database was not checked: `--html results.sqlite` wrote the page over the runs."""
    from harness.store.results import ResultsStore

    ResultsStore(tmp_db)
    path = Path(tmp_db.removeprefix("sqlite:///"))
    before = path.read_bytes()
    args = ["roofline", "--model", "char", "--gpu", "H100", "--html", str(path)]
    if not by_env:  # tmp_db sets HARNESS_DB: here --db alone names it
        monkeypatch.delenv("HARNESS_DB")
    result = CliRunner().invoke(app, args if by_env else [*args, "--db", tmp_db])
    assert result.exit_code == 2, result.output
    assert f"--html {path} is a file this command reads" in result.output
    assert path.read_bytes() == before


def test_wide_shows_the_columns_the_note_says_it_shows(
    app: typer.Typer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The note under a table cut to the terminal offers --wide: roofline takes it."""
    monkeypatch.setenv("COLUMNS", "80")
    args = ["roofline", "--model", "char", "--device", "cpu"]
    narrow = CliRunner().invoke(app, args)
    assert narrow.exit_code == 0, narrow.output
    left_out = next(line for line in narrow.output.split("note: ") if "columns left out" in line)
    assert "--wide shows them" in left_out and "bound" in left_out

    def headers(output: str) -> str:  # the sub-blocks table's (per phase, under it, may show its own)
        return "".join(line for line in output.split("per phase")[0].splitlines() if line.startswith("┃"))

    assert "bound" not in headers(narrow.output)
    wide = CliRunner().invoke(app, [*args, "--wide"])
    assert wide.exit_code == 0, wide.output
    assert "bound" in headers(wide.output) and "columns left out" not in wide.output


def test_command_measures_the_cpu(app: typer.Typer) -> None:
    result = CliRunner().invoke(
        app, ["roofline", "--model", "char", "--measure", "--device", "cpu", "-f", "csv"]
    )
    assert result.exit_code == 0, result.output
    assert "measured: fp32 matmul 1024×1024, copy 64 MiB" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "nope"], "unknown model 'nope'"),
        (["--model", "char", "--context-length", "4096"], "learned positions for 64 tokens"),
        (["--gpu", "Voodoo2"], "no datasheet roofs for GPU 'Voodoo2'"),
        (["--gpu", "", "--device", "cpu"], "no datasheet roofs for GPU ''"),  # not taken for no --gpu
        # a name holding a datasheet name is not one: the patterns are for the names torch gives
        (["--gpu", "H100*"], "no datasheet roofs for GPU 'H100*'"),
        (["--gpu", "NVIDIA H100 80GB HBM3"], "no datasheet roofs for GPU 'NVIDIA H100 80GB HBM3'"),
        (["--batch-size", "0"], "--batch-size must be a positive number"),
        # 0 is a length given, refused as `run -t 0` refuses it: it was taken for none (the model's, 64)
        (["--model", "char", "--context-length", "0"], "--context-length must be a positive number, got 0"),
    ],
)
def test_command_errors_are_one_line(app: typer.Typer, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["roofline", *args])
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_point_above_its_roof_is_said_with_why() -> None:
    """Seed 000: softmax backward at 120% of the measured copy-bandwidth roof (its data stays in cache)."""
    from analysis.runs.roofline import above_roof

    roofs = Roofs("EPYC, measured: fp32 matmul 1024×1024, copy 64 MiB", peak_flops=100e12, bandwidth=1e12)
    # softmax: 2e9 bytes at 1 TB/s take 2 ms on the roof; 1.6667 ms is 120% of it; mlp_up 125% of compute
    times = {("softmax", "forward"): 2e6 / 1.2, ("mlp_up", "forward"): 16e6}
    table = roofline_table(small_costs(), times, roofs)
    assert table.set_index("sub-block").loc["softmax", "of roof (%)"] == pytest.approx(120.0)
    lines = above_roof(table, roofs)
    assert lines == [
        "mlp_up forward: 125% of the measured compute roof (125.000 against 100.000 TFLOP/s): the roof's "
        "peak is below what this shape reaches (a measured peak is one matmul size's), or the analytic count "
        "charges work its kernels skip",
        "softmax forward: 120% of the measured bandwidth roof (1,200.0 GB/s against 1,000.0 GB/s): its "
        "1,907.3 MiB stayed in cache between reads and writes, faster than the memory the roof measures; "
        "the roof counts every byte as a trip to memory, so a cache-resident point can lie above it",
    ]
    below = roofline_table(small_costs(), {("softmax", "forward"): 4e6}, roofs)
    assert above_roof(below, roofs) == [] and above_roof(table, None) == []


# A real run: `harness run tiny --device cpu --nvtx-detail --steps 3 --warmup 1 --attention math` on this
# project's shared 2-core AMD EPYC (run tiny-20261125-105730-f6fe), its mean time per step of each sub-block
# (ns, `harness roofline RUN --format json`), and the roofs `harness roofline RUN --measure` measured on
# the same machine a few minutes later, as its roofs table printed them (0.020 TFLOP/s, 5.722 GB/s).
REAL_TIMES_NS = {
    ("embedding", "forward"): 18_778_762,
    ("norm", "forward"): 277_329_395,
    ("qkv_proj", "forward"): 234_903_494,
    ("qk_scores", "forward"): 107_144_049,
    ("softmax", "forward"): 34_929_218,
    ("attn_v", "forward"): 58_340_259,
    ("out_proj", "forward"): 83_684_288,
    ("mlp_up", "forward"): 336_055_969,
    ("mlp_act", "forward"): 58_076_859,
    ("mlp_down", "forward"): 170_493_849,
    ("lm_head", "forward"): 254_087_200,
    ("norm", "backward"): 479_982_005,
    ("qkv_proj", "backward"): 364_811_947,
    ("qk_scores", "backward"): 161_898_444,
    ("softmax", "backward"): 43_211_328,
    ("attn_v", "backward"): 114_380_212,
    ("out_proj", "backward"): 171_340_146,
    ("mlp_up", "backward"): 589_450_240,
    ("mlp_act", "backward"): 168_343_514,
    ("mlp_down", "backward"): 338_960_328,
    ("lm_head", "backward"): 478_219_652,
}
REAL_ROOFS = Roofs(
    "AMD EPYC, measured: fp32 matmul 1024×1024, copy 64 MiB", peak_flops=0.020e12, bandwidth=5.722e9
)


def test_a_real_point_above_a_measured_roof_is_said_with_why() -> None:
    """On real data: the tiny model's LM head (its largest matmul, 4·128 × 512 × 10,000) ran faster than the
    1024×1024 matmul that measured the compute roof, so it lies above that roof, forward and backward; the
    command says so and why, and stays silent on every point below its roof."""
    from analysis.runs.roofline import above_roof

    costs = subblock_costs(workloads.get_spec("tiny"), 4, 128, "fp32", "train", attention="math")
    table = roofline_table(costs, REAL_TIMES_NS, REAL_ROOFS)
    rows = table.set_index(["sub-block", "pass"])
    above = rows[rows["of roof (%)"] > 100]
    assert list(above.index) == [("lm_head", "forward"), ("lm_head", "backward")]
    assert above["of roof (%)"].round(1).tolist() == [103.2, 109.6]
    lines = above_roof(table, REAL_ROOFS)
    why = (
        ": the roof's peak is below what this shape reaches (a measured peak is one matmul size's), or the "
        "analytic count charges work its kernels skip"
    )
    assert lines == [
        "lm_head forward: 103% of the measured compute roof (0.021 against 0.020 TFLOP/s)" + why,
        "lm_head backward: 110% of the measured compute roof (0.022 against 0.020 TFLOP/s)" + why,
    ]
    # the memory-bound points (softmax, norms, activation) stay well below the copy-bandwidth roof here
    memory = rows[(rows["bound"] == "memory") & rows["of roof (%)"].notna()]
    assert len(memory) >= 5 and (memory["of roof (%)"] < 100).all()


def test_generate_is_the_prompt_then_each_decoded_token_against_its_cache() -> None:
    spec = workloads.get_spec("tiny")
    b, prompt, new = 2, 16, 6
    costs = subblock_costs(spec, b, prompt, "bf16", "generate", attention="sdpa", new_tokens=new)
    assert list(dict.fromkeys(costs["pass"])) == ["prefill", "decode"]
    forward = subblock_costs(spec, b, prompt, "bf16", "forward", attention="sdpa")
    prefill = costs[costs["pass"] == "prefill"].drop(columns="pass").reset_index(drop=True)
    pd.testing.assert_frame_equal(prefill, forward.drop(columns="pass"))  # the prompt: a forward pass
    decode = costs[costs["pass"] == "decode"].set_index("sub-block")
    d, layers = spec.d_model, spec.num_layers
    # tokens 1 … 5, token k attending to prompt + k keys: 2 products of 2 · b · (prompt + k) · d per layer
    keys = sum(prompt + k for k in range(1, new))
    assert decode.loc["sdpa", "flops"] == layers * 2 * 2 * b * keys * d
    # every weight read once per token: qkv_proj's 3d² weights, 5 times, with the tokens in and out
    assert decode.loc["qkv_proj", "bytes"] == (new - 1) * layers * (b * d + 3 * d * d + b * 3 * d) * 2
    assert (
        decode.loc["qkv_proj", "intensity"] < 2 < prefill.set_index("sub-block").loc["qkv_proj", "intensity"]
    )


def test_a_point_just_above_its_roof_is_not_said_to_be_at_100_percent() -> None:
    """100.3% of the roof rounds to 100 whole: the line says 100.3%, a share that reads as above the roof."""
    from analysis.runs.roofline import above_roof

    roofs = Roofs("EPYC, measured: fp32 matmul 1024×1024, copy 64 MiB", peak_flops=100e12, bandwidth=1e12)
    flops = roofline_table(small_costs(), None, roofs).set_index(["sub-block", "pass"])
    flops = flops.loc[("mlp_up", "forward"), "flops"]
    times = {("mlp_up", "forward"): flops / 100e12 / 1.003 * 1e9}  # 100.3% of the compute roof
    table = roofline_table(small_costs(), times, roofs)
    assert table.set_index("sub-block").loc["mlp_up", "of roof (%)"] == pytest.approx(100.3)
    (line,) = above_roof(table, roofs)
    assert line.startswith("mlp_up forward: 100.3% of the measured compute roof")
