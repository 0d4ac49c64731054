"""Analytic matmul FLOPs, counted as torch.utils.flop_counter.FlopCounterMode counts them.

Every matmul [m, k] × [k, n] is 2·m·n·k. Per layer: the fused qkv projection, Q·Kᵀ, probabilities·V, the
out projection and the MLP (SwiGLU: a fused up projection to 2·d_ff and a down projection; GELU: up to
d_ff and down); then the LM head. Causal attention is counted over the full square of queries × keys, as
plain matmul/bmm compute it. Norms, activations, softmax, embeddings and bias adds are left out.
"""

from __future__ import annotations

from workloads.specs import ModelSpec


def dense_flops(spec: ModelSpec, tokens: int) -> int:
    """The weight matmuls (projections, MLP, LM head) for `tokens` tokens: 2 × weights touched per token."""
    d = spec.d_model
    mlp = (3 if spec.family == "transformer" else 2) * d * spec.d_ff  # SwiGLU has three d×d_ff matrices
    per_layer = 4 * d * d + mlp  # qkv (3·d²) + out (d²) + MLP
    return 2 * tokens * (spec.num_layers * per_layer + d * spec.vocab_size)


def attention_flops(spec: ModelSpec, batch: int, queries: int, keys: int) -> int:
    """Q·Kᵀ and probabilities·V in every layer, each 2·queries·keys·d_model per sequence."""
    return spec.num_layers * 2 * (2 * batch * queries * keys * spec.d_model)


def forward_flops(spec: ModelSpec, batch: int, seq: int) -> int:
    """One forward pass over [batch, seq] tokens."""
    return dense_flops(spec, batch * seq) + attention_flops(spec, batch, seq, seq)


def train_flops(spec: ModelSpec, batch: int, seq: int) -> int:
    """Forward and backward: the backward pass does two matmuls (input and weight grads) per forward one."""
    return 3 * forward_flops(spec, batch, seq)


def decode_flops(spec: ModelSpec, batch: int, ctx: int) -> int:
    """One new token per sequence attending to `ctx` keys (the cached ones plus itself)."""
    return dense_flops(spec, batch) + attention_flops(spec, batch, 1, ctx)
