"""The analytic memory breakdown against the real tensors of the real model and optimizer on the CPU.

Parameters, gradients, optimizer state, autocast weight copies and the KV cache must match byte for byte.
Activations are compared with what autograd actually saves for backward (saved_tensors_hooks over one
forward + loss, each storage once, parameters and weight copies apart) within ACTIVATION_TOLERANCE (1%).
On torch 2.13's CPU kernels the formula lands on the byte, except with batch 1, where synthetic_batch's
inputs and targets are views of one token buffer (a few hundred bytes fewer than two). The band is there
because which tensors a kernel saves, and whether a reshape before a matmul is a view or a copy, are
details of torch's kernels and backends (CUDA's flash attention saves other things than the CPU's): a newer
torch may move the count by a tensor of B·T·d, which should not fail a memory estimate, while a missing
per-block term (at least one B·T·d tensor in each of the layers) is still caught.
"""

from __future__ import annotations

import contextlib
import functools

import pytest
import torch

import workloads
from workloads.memory import memory_breakdown, param_count
from workloads.specs import ModelSpec

ACTIVATION_TOLERANCE = 0.01
LOW = {"bf16": torch.bfloat16, "fp16": torch.float16}
# one head, and a GPT-2 with one head: the shapes where reshapes turn from copies into views
ONE_HEAD = ModelSpec("one-head", "transformer", 64, 96, 2, 1, 100, 32)
ONE_HEAD_GPT2 = ModelSpec("one-head-gpt2", "gpt2", 64, 256, 2, 1, 100, 32)


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def spec_for(name: str | ModelSpec) -> ModelSpec:
    return name if isinstance(name, ModelSpec) else workloads.get_spec(name)


@functools.cache
def model_for(spec: ModelSpec, attention: str) -> torch.nn.Module:
    """Built once per shape: these tests only run forward, so the weights never change."""
    return workloads.build_model(spec, attention=attention)


def autocast(precision: str):
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=LOW[precision])


def is_weight_copy(t: torch.Tensor) -> bool:
    """A low-precision cast of a parameter (autocast's cached weight), maybe transposed for the matmul."""
    fn = t.grad_fn
    while fn is not None and type(fn).__name__ in ("TBackward0", "ToCopyBackward0"):
        fn = fn.next_functions[0][0]
    return fn is not None and type(fn).__name__ == "AccumulateGrad" and t.grad_fn is not None


def saved_for_backward(model, x, y, precision: str) -> tuple[int, int]:
    """(activation bytes, weight-copy bytes) autograd keeps for backward after one forward + loss."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    activations: dict[int, int] = {}
    copies: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            (copies if is_weight_copy(t) else activations)[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast(precision):
        loss = workloads.loss_fn(model(x), y)
    assert loss.requires_grad  # the graph (and what it saved) was alive while we counted
    return sum(activations.values()), sum(copies.values())


@pytest.mark.parametrize("name", ["tiny", "char", ONE_HEAD_GPT2])
def test_parameters_gradients_and_adamw_state_are_exact_after_one_step(name) -> None:
    spec = spec_for(name)
    model = workloads.build_model(spec)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    x, y = workloads.synthetic_batch(spec, 2, 16, generator=torch.Generator().manual_seed(0))
    workloads.loss_fn(model(x), y).backward()
    opt.step()
    params = list(model.parameters())
    state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    b = memory_breakdown(spec, 2, 16)
    assert (b.params, param_count(spec)[1]) == (workloads.count_params(model), len(params))
    assert b.parameters == nbytes(params)
    assert b.gradients == nbytes(p.grad for p in params)
    assert b.optimizer_state == nbytes(state)
    assert b.weight_copies == 0 and b.kv_cache == 0


CASES = [
    ("tiny", "sdpa", "fp32", 2, 16),
    ("tiny", "math", "fp32", 2, 16),
    ("tiny", "sdpa", "bf16", 2, 16),
    ("tiny", "math", "bf16", 3, 24),
    ("tiny", "math", "fp32", 1, 32),  # batch 1: v reaches bmm as a view of the qkv buffer
    ("char", "sdpa", "fp32", 2, 16),
    ("char", "math", "fp32", 4, 32),
    ("char", "sdpa", "bf16", 2, 64),
    ("char", "math", "bf16", 1, 16),
    (ONE_HEAD, "sdpa", "fp32", 2, 16),
    (ONE_HEAD, "math", "bf16", 2, 16),
    (ONE_HEAD_GPT2, "sdpa", "fp32", 2, 16),
    (ONE_HEAD_GPT2, "math", "fp32", 2, 16),
]


@pytest.mark.parametrize(("name", "attention", "precision", "batch", "context"), CASES)
def test_activations_and_weight_copies_match_what_autograd_saves(
    name, attention: str, precision: str, batch: int, context: int
) -> None:
    spec = spec_for(name)
    model = model_for(spec, attention)
    x, y = workloads.synthetic_batch(spec, batch, context, generator=torch.Generator().manual_seed(0))
    activations, copies = saved_for_backward(model, x, y, precision)
    b = memory_breakdown(spec, batch, context, precision, attention=attention)
    assert b.weight_copies == copies
    assert b.activations == pytest.approx(activations, rel=ACTIVATION_TOLERANCE)


def test_math_attention_saves_the_seq_len_squared_probabilities() -> None:
    spec = workloads.get_spec("tiny").with_overrides(context_length=256)
    sdpa = memory_breakdown(spec, 4, 256, attention="sdpa").activations
    math = memory_breakdown(spec, 4, 256, attention="math").activations
    b, h, t, d, layers = 4, spec.num_heads, 256, spec.d_model, spec.num_layers
    # per layer, math keeps the probabilities, the mask and a v copy instead of the qkv buffer, the output
    # and the logsumexp
    diff = layers * (
        b * h * t * t * 4 + t * t + b * t * d * 4 - 3 * b * t * d * 4 - b * t * d * 4 - b * h * t * 4
    )
    assert math - sdpa == diff


@pytest.mark.parametrize(("name", "precision"), [("tiny", "fp32"), ("char", "bf16")])
def test_kv_cache_matches_the_cache_generate_builds(name: str, precision: str) -> None:
    spec = workloads.get_spec(name)
    model = workloads.build_model(spec)
    dtype = torch.float32 if precision == "fp32" else LOW[precision]
    cache = workloads.new_cache(model, 3, 20 + 12 - 1, dtype=dtype)  # the last new token is not fed back
    b = memory_breakdown(spec, 3, 20, precision, mode="generate", new_tokens=12)
    assert b.kv_cache == nbytes([*cache.k, *cache.v])
    assert b.gradients == b.optimizer_state == b.activations == 0


def test_forward_keeps_parameters_and_weight_copies_only() -> None:
    spec = workloads.get_spec("gpt2")
    b = memory_breakdown(spec, 8, 1024, "bf16", mode="forward")
    assert b.params == 124_439_808  # GPT-2 small, head tied
    assert b.parameters == 124_439_808 * 4
    assert b.weight_copies == (12 * (4 * 768 * 768 + 2 * 768 * 3072) + 50257 * 768) * 2
    assert b.gradients == b.optimizer_state == b.activations == b.kv_cache == 0
    assert b.total == b.parameters + b.weight_copies
    assert b.to_dict()["total"] == b.total


def test_adamw_state_is_two_fp32_moments_and_a_step_per_tensor() -> None:
    spec = workloads.get_spec("tiny")
    b = memory_breakdown(spec, 4)
    params, tensors = param_count(spec)
    assert b.optimizer_state == 8 * params + 4 * tensors
    assert memory_breakdown(spec, 4, optimizer="none").optimizer_state == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"precision": "int8"}, "unknown precision 'int8'"),
        ({"mode": "eval"}, "unknown mode 'eval'"),
        ({"optimizer": "sgd"}, "unknown optimizer 'sgd'"),
        ({"attention": "flash"}, "unknown attention 'flash'"),
    ],
)
def test_unknown_settings_raise_value_error(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        memory_breakdown(workloads.get_spec("tiny"), 1, **kwargs)
