"""The workloads package: sizes, models, KV cache, data, FLOP formulas and device peaks."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import workloads
from workloads import flops
from workloads.peak import peak_flops
from workloads.specs import ModelSpec

SIZES = {  # name: (family, d_model, d_ff, num_layers, num_heads, vocab_size, context_length)
    "tiny": ("transformer", 512, 1344, 4, 16, 10000, 128),
    "small": ("transformer", 768, 3072, 12, 12, 10000, 128),
    "medium": ("transformer", 1024, 4096, 24, 16, 10000, 128),
    "large": ("transformer", 1280, 5120, 36, 20, 10000, 128),
    "xl": ("transformer", 1600, 6400, 48, 25, 10000, 128),
    "2.7B": ("transformer", 2560, 10240, 32, 32, 10000, 128),
    "gpt2": ("gpt2", 768, 3072, 12, 12, 50257, 1024),
    "gpt2-medium": ("gpt2", 1024, 4096, 24, 16, 50257, 1024),
    "gpt2-large": ("gpt2", 1280, 5120, 36, 20, 50257, 1024),
    "gpt2-xl": ("gpt2", 1600, 6400, 48, 25, 50257, 1024),
    "char": ("gpt2", 128, 512, 4, 4, 65, 64),
}

FAMILIES_AND_KINDS = [("tiny", "math"), ("tiny", "sdpa"), ("char", "math"), ("char", "sdpa")]


def expected_params(spec: ModelSpec) -> int:
    """Closed form. TransformerLM: untied embedding and head, per layer 4d² (attention) + 3·d·d_ff (SwiGLU)
    + 2d (two RMSNorm gains), final RMSNorm. GPT-2: tied head, learned positions, biases, LayerNorms."""
    d, f, n, v = spec.d_model, spec.d_ff, spec.num_layers, spec.vocab_size
    if spec.family == "transformer":
        return 2 * v * d + n * (4 * d * d + 3 * d * f + 2 * d) + d
    per_layer = (4 * d * d + 4 * d) + (2 * d * f + f + d) + 4 * d  # attention, MLP, two LayerNorms
    return v * d + spec.context_length * d + n * per_layer + 2 * d


@pytest.fixture(scope="module")
def models() -> dict[tuple[str, str], torch.nn.Module]:
    return {
        (n, k): workloads.build_model(workloads.get_spec(n), attention=k).eval()
        for n, k in FAMILIES_AND_KINDS
    }


def test_every_size_has_the_listed_hyperparameters() -> None:
    assert tuple(SIZES) == workloads.MODEL_NAMES
    for name, row in SIZES.items():
        s = workloads.get_spec(name)
        assert s.name == name
        assert (s.family, s.d_model, s.d_ff, s.num_layers, s.num_heads, s.vocab_size, s.context_length) == row


def test_unknown_model_raises_value_error() -> None:
    with pytest.raises(ValueError, match="unknown model 'gpt5'"):
        workloads.get_spec("gpt5")


def test_with_overrides_replaces_only_what_is_given() -> None:
    tiny = workloads.get_spec("tiny")
    assert tiny.with_overrides() == tiny
    assert tiny.with_overrides(vocab_size=500) == ModelSpec("tiny", "transformer", 512, 1344, 4, 16, 500, 128)
    assert tiny.with_overrides(context_length=256).context_length == 256
    assert tiny.with_overrides(context_length=256).vocab_size == 10000
    assert tiny.context_length == 128  # frozen: the original is untouched


def test_gpt2_has_124m_parameters_with_the_head_tied() -> None:
    model = workloads.build_model(workloads.get_spec("gpt2"))
    assert model.lm_head.weight is model.tok_emb.weight
    assert workloads.count_params(model) == 124_439_808 == expected_params(workloads.get_spec("gpt2"))


def test_tiny_parameter_count_matches_the_closed_form(models) -> None:
    # 2·10000·512 + 4·(4·512² + 3·512·1344 + 2·512) + 512
    assert (
        workloads.count_params(models["tiny", "math"])
        == 22_696_448
        == expected_params(models["tiny", "math"].spec)
    )
    assert workloads.count_params(models["char", "sdpa"]) == expected_params(workloads.get_spec("char"))


def test_closed_form_parameter_counts_of_the_big_sizes() -> None:
    # The published GPT-2 sizes (tied head), and the TransformerLM sizes the formula gives.
    counts = {n: expected_params(workloads.get_spec(n)) for n in SIZES}
    assert counts["gpt2-medium"] == 354_823_168
    assert counts["gpt2-large"] == 774_030_080
    assert counts["gpt2-xl"] == 1_557_611_200
    assert counts["xl"] == 1_998_235_200
    assert counts["2.7B"] == 3_406_809_600  # SwiGLU at d_ff = 4·d: 3.4B, not the 2.7B of a GELU MLP


@pytest.mark.parametrize(("name", "kind"), FAMILIES_AND_KINDS)
def test_logits_shape(models, name: str, kind: str) -> None:
    spec = workloads.get_spec(name)
    x, _ = workloads.synthetic_batch(spec, 3, 10)
    with torch.no_grad():
        logits = models[name, kind](x)
    assert logits.shape == (3, 10, spec.vocab_size)
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()


@pytest.mark.parametrize("name", ["tiny", "char"])
def test_math_and_sdpa_attention_agree(models, name: str) -> None:
    x, _ = workloads.synthetic_batch(
        workloads.get_spec(name), 2, 16, generator=torch.Generator().manual_seed(3)
    )
    with torch.no_grad():
        torch.testing.assert_close(models[name, "math"](x), models[name, "sdpa"](x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("name", "kind"), FAMILIES_AND_KINDS)
def test_kv_cache_decoding_matches_the_full_forward(models, name: str, kind: str) -> None:
    model = models[name, kind]
    x, _ = workloads.synthetic_batch(model.spec, 2, 12, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(x)
        cache = workloads.new_cache(model, 2, 12, device="cpu", dtype=torch.float32)
        steps = [model(x[:, :5], cache=cache), model(x[:, 5:8], cache=cache)]  # prefill, then a chunk
        steps += [model(x[:, i : i + 1], cache=cache) for i in range(8, 12)]  # one token at a time
    assert cache.length == 12
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-4, rtol=1e-4)


def test_kv_cache_has_one_preallocated_k_and_v_per_layer(models) -> None:
    cache = workloads.new_cache(models["tiny", "sdpa"], 3, 20, device="cpu", dtype=torch.bfloat16)
    assert len(cache.k) == len(cache.v) == 4
    assert cache.k[0].shape == (3, 16, 20, 32) and cache.v[3].dtype == torch.bfloat16
    assert cache.length == 0


def test_kv_cache_refuses_to_overflow(models) -> None:
    model = models["char", "sdpa"]
    cache = workloads.new_cache(model, 1, 4, device="cpu", dtype=torch.float32)
    with torch.no_grad(), pytest.raises(ValueError, match="holds 4 positions"):
        model(torch.zeros(1, 5, dtype=torch.long), cache=cache)


def test_gpt2_refuses_positions_past_its_context(models) -> None:
    with torch.no_grad(), pytest.raises(ValueError, match="64 positions"):
        models["char", "math"](torch.zeros(1, 65, dtype=torch.long))


def test_init_is_seeded_and_leaves_the_global_rng_alone() -> None:
    spec = workloads.get_spec("char")
    rng = torch.get_rng_state()
    a, b = workloads.build_model(spec, seed=7), workloads.build_model(spec, seed=7)
    c = workloads.build_model(spec, seed=8)
    assert torch.equal(torch.get_rng_state(), rng)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters(), strict=True):
        assert torch.equal(pa, pb), name
        if name.endswith("weight") and pa.dim() == 2:
            assert not torch.equal(pa, pc), name


def test_gpt2_init_follows_nanogpt() -> None:
    model = workloads.build_model(workloads.get_spec("gpt2"))
    assert model.tok_emb.weight.std().item() == pytest.approx(0.02, rel=0.01)
    assert model.blocks[0].mlp.up.weight.std().item() == pytest.approx(0.02, rel=0.01)
    assert model.blocks[0].attn.out.weight.std().item() == pytest.approx(0.02 / math.sqrt(24), rel=0.02)
    assert torch.count_nonzero(model.blocks[0].attn.qkv.bias) == 0


def test_unknown_attention_raises_value_error() -> None:
    with pytest.raises(ValueError, match="unknown attention 'flash'"):
        workloads.build_model(workloads.get_spec("char"), attention="flash")


def test_synthetic_batch_targets_are_the_next_tokens() -> None:
    spec = workloads.get_spec("char")
    x, y = workloads.synthetic_batch(spec, 4, 32, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 32) and x.dtype == y.dtype == torch.long
    assert torch.equal(y[:, :-1], x[:, 1:])
    assert int(x.min()) >= 0 and int(torch.cat([x, y]).max()) < spec.vocab_size
    x2, _ = workloads.synthetic_batch(spec, 4, 32, generator=torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)


def test_loss_is_fp32_cross_entropy() -> None:
    logits = torch.zeros(2, 5, 65, dtype=torch.bfloat16)
    targets = torch.randint(0, 65, (2, 5))
    loss = workloads.loss_fn(logits, targets)
    assert loss.dtype == torch.float32 and loss.dim() == 0
    assert loss.item() == pytest.approx(math.log(65))


def _matched(model: torch.nn.Module) -> dict[str, list[str]]:
    """qualname → the DETAIL_RANGES suffixes it matches, by the harness's rule (under blocks., endswith)."""
    matched = {}
    for qualname, _ in model.named_modules():
        hits = [
            s
            for s in workloads.DETAIL_RANGES
            if qualname.startswith("blocks.") and qualname.endswith("." + s)
        ]
        if hits:
            matched[qualname] = hits
    return matched


@pytest.mark.parametrize(
    ("name", "kind", "attn_parts"),
    [
        ("tiny", "math", ["qkv", "scores", "softmax", "context", "out"]),
        ("char", "sdpa", ["qkv", "sdpa", "out"]),
    ],
)
def test_detail_ranges_name_each_piece_once_per_layer(
    models, name: str, kind: str, attn_parts: list[str]
) -> None:
    suffixes = ["attn", *(f"attn.{p}" for p in attn_parts), "mlp", "mlp.up", "mlp.act", "mlp.down"]
    expected = {f"blocks.{i}.{s}": [s] for i in range(4) for s in suffixes}
    assert _matched(models[name, kind]) == expected
    assert set(workloads.DETAIL_RANGES.values()) >= {"attention", "qkv_proj", "mlp_up", "sdpa", "qk_scores"}


def _counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("name", ["tiny", "char"])
def test_forward_and_train_flops_match_the_flop_counter(models, name: str) -> None:
    model = models[name, "math"]
    spec = model.spec
    x, y = workloads.synthetic_batch(spec, 2, 32)
    fwd = _counted(lambda: model(x))
    train = _counted(lambda: workloads.loss_fn(model(x), y).backward())
    model.zero_grad(set_to_none=True)
    assert flops.forward_flops(spec, 2, 32) == pytest.approx(fwd, rel=0.05)
    assert flops.train_flops(spec, 2, 32) == pytest.approx(train, rel=0.05)


@pytest.mark.parametrize("name", ["tiny", "char"])
def test_decode_flops_match_the_flop_counter(models, name: str) -> None:
    model = models[name, "math"]
    x, _ = workloads.synthetic_batch(model.spec, 2, 21)
    cache = workloads.new_cache(model, 2, 21, device="cpu", dtype=torch.float32)
    with torch.no_grad():
        model(x[:, :20], cache=cache)
        one = _counted(lambda: model(x[:, 20:], cache=cache))
    assert flops.decode_flops(model.spec, 2, 21) == pytest.approx(one, rel=0.05)


def test_sdpa_flops_match_the_counter_where_it_sees_the_fused_kernel(models) -> None:
    # FlopCounterMode has formulas for the CUDA flash/efficient/cuDNN kernels but not the CPU one, so on a
    # CPU build it counts everything except attention.
    model = models["char", "sdpa"]
    spec = model.spec
    x, _ = workloads.synthetic_batch(spec, 2, 64)
    with torch.no_grad():
        counted = _counted(lambda: model(x))
    full = flops.forward_flops(spec, 2, 64)
    assert counted in (full, full - flops.attention_flops(spec, 2, 64, 64))


def test_flop_formulas_by_hand() -> None:
    char = workloads.get_spec("char")
    # per layer 4·128² + 2·128·512 weights; LM head 128·65; attention 2 matmuls of 2·T²·d per sequence
    dense = 2 * (4 * (4 * 128 * 128 + 2 * 128 * 512) + 128 * 65)
    assert flops.forward_flops(char, 1, 10) == 10 * dense + 4 * 2 * 2 * 10 * 10 * 128
    assert flops.decode_flops(char, 3, 10) == 3 * dense + 4 * 2 * 2 * 10 * 128 * 3
    assert flops.train_flops(char, 2, 8) == 3 * flops.forward_flops(char, 2, 8)


@pytest.mark.parametrize(
    ("device", "precision", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989e12),
        ("NVIDIA H100 80GB HBM3", "fp32", 67e12),
        ("NVIDIA H100 PCIe", "bf16", 756e12),
        ("NVIDIA H100 NVL", "fp16", 835.5e12),
        ("NVIDIA H200", "bf16", 989e12),
        ("NVIDIA A100-SXM4-80GB", "fp32", 19.5e12),
        ("NVIDIA A100 80GB PCIe", "bf16", 312e12),
        ("NVIDIA A10", "bf16", 125e12),
        ("NVIDIA A10G", "bf16", None),  # not in the table: no A10 numbers for it
        ("NVIDIA L4", "fp16", 121e12),
        ("NVIDIA GeForce RTX 4090", "bf16", 165.2e12),
        ("NVIDIA GeForce RTX 5090", "fp32", 104.8e12),
        ("Tesla V100-SXM2-16GB", "fp16", 125e12),
        ("Tesla V100-PCIE-32GB", "fp32", 14e12),
        ("Tesla V100-SXM2-16GB", "bf16", None),
        ("Tesla T4", "bf16", None),
        ("Tesla T4", "fp16", 65e12),
        ("cpu", "fp32", None),
    ],
)
def test_peak_flops_by_device_name(device: str, precision: str, expected: float | None) -> None:
    assert peak_flops(device, precision) == expected


def test_peak_flops_rejects_an_unknown_precision() -> None:
    with pytest.raises(ValueError, match="unknown precision"):
        peak_flops("NVIDIA H100 80GB HBM3", "fp8")
