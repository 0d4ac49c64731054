"""Analytic memory of one training (or forward, or generate) step: parameters, gradients, optimizer state,
autocast weight copies, activations saved for backward, KV cache. Bytes, from the model's shape alone.

What is counted, and why it is what torch holds (checked against the real tensors in tests/test_memory.py):

- parameters: every parameter once (GPT-2's tied LM head is the token embedding), fp32. Mixed precision
  here is autocast over fp32 parameters, so these are the master weights: there is no second copy.
  Buffers (RoPE's inverse frequencies, head_dim / 2 floats) are left out.
- gradients (train): one fp32 gradient per parameter.
- optimizer state (train, AdamW): exp_avg and exp_avg_sq, fp32, per parameter, and the 4-byte `step`
  tensor AdamW keeps per parameter tensor (amsgrad off, as the runner builds it).
- weight copies (bf16/fp16): autocast casts each matmul weight (qkv, out, MLP, LM head; not embeddings or
  norms) once per autocast region and keeps the copy until the region ends; in training the backward pass
  keeps it too (it is saved for the input gradient). Zero in fp32.
- activations (train): the tensors autograd saves for backward during forward + loss, each storage once,
  parameters excluded. Per block, for B×T tokens (d model width, F d_ff, H heads):
    norms      block input and mid-block residual (fp32), each with its normalised copy (RMSNorm) or mean
               and rstd (LayerNorm), and RMSNorm's rsqrt [B, T, 1]
    matmuls    the inputs of the qkv, out and MLP-up projections, in the compute dtype
    attention  sdpa: the qkv buffer (v is a view of it), q and k after RoPE (TransformerLM), the output and
               the fp32 logsumexp [B, H, T]; math: q and k, v (a copy unless B or H is 1), the probabilities
               [B, H, T, T] and the bool causal mask [T, T]
    MLP        SwiGLU: the fused up output (2F), silu(a) and the down input (F each); GELU: its input and
               output (F each)
  plus the token (and position) ids, RoPE's cos/sin tables, the final norm, the LM-head input, the fp32
  log-probabilities [B·T, vocab] the loss keeps, the targets and the loss's total weight. The compute
  dtype is bf16/fp16 under autocast (matmul inputs and outputs, softmax, SwiGLU/GELU); the residual stream,
  norms, logsumexp and loss stay fp32. Forward and generate keep nothing for backward: their activations are
  0 (their short-lived working set is not counted).
- KV cache (generate): K and V per layer, [B, H, prompt + new tokens - 1, head_dim], fp32 or the compute
  dtype (the last new token is never fed back).

The total is the sum. It bounds what one step holds rather than equalling the allocator's peak: gradients
are allocated while backward frees activations, and the allocator rounds and caches blocks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from workloads.names import ATTENTIONS, MODES
from workloads.specs import ModelSpec

FP32 = 4
INT64 = 8
COMPUTE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
OPTIMIZERS = ("adamw", "none")


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes of each part of one step; `params` is the parameter count."""

    params: int
    parameters: int
    gradients: int
    optimizer_state: int
    weight_copies: int
    activations: int
    kv_cache: int

    @property
    def total(self) -> int:
        return (
            self.parameters
            + self.gradients
            + self.optimizer_state
            + self.weight_copies
            + self.activations
            + self.kv_cache
        )

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "total": self.total}


def param_count(spec: ModelSpec) -> tuple[int, int]:
    """(parameters, parameter tensors) of the model `workloads.build_model(spec)` builds."""
    d, f, n, v = spec.d_model, spec.d_ff, spec.num_layers, spec.vocab_size
    if spec.family == "transformer":  # untied embedding and head, no biases, RMSNorm gains
        return 2 * v * d + n * (4 * d * d + 3 * d * f + 2 * d) + d, 6 * n + 3
    # GPT-2: tied head, learned positions, biases everywhere, LayerNorm weight and bias
    per_layer = (4 * d * d + 4 * d) + (2 * d * f + f + d) + 4 * d
    return v * d + spec.context_length * d + n * per_layer + 2 * d, 12 * n + 4


def matmul_weights(spec: ModelSpec) -> int:
    """Elements of the weights autocast casts: qkv, out, the MLP and the LM head (per layer, then once)."""
    d, f = spec.d_model, spec.d_ff
    mlp = 3 * d * f if spec.family == "transformer" else 2 * d * f
    return spec.num_layers * (4 * d * d + mlp) + spec.vocab_size * d


def activation_bytes(spec: ModelSpec, batch: int, context: int, precision: str, attention: str) -> int:
    """Bytes autograd saves for backward in one forward + loss over [batch, context] tokens."""
    b, t, d, h, f = batch, context, spec.d_model, spec.num_heads, spec.d_ff
    lp = COMPUTE_BYTES[precision]
    btd = b * t * d
    lse = b * h * t * FP32
    probs = b * h * t * t * lp
    mask = t * t  # bool
    if spec.family == "transformer":
        norm = btd * FP32 + b * t * FP32 + btd * FP32  # input, rsqrt, normalised
        matmul_inputs = 3 * btd * lp  # qkv in, out in (heads merged), MLP up in
        qk = 2 * btd * lp  # q and k after RoPE: new tensors
        if attention == "sdpa":
            # v is a view of the qkv buffer; with one head (or one token) the merged heads are a view of
            # the output, else a copy
            shared = h == 1 or t == 1
            attn = 3 * btd * lp + qk + btd * lp + lse - (btd * lp if shared else 0)
        else:
            v = 3 * btd * lp if b == 1 or h == 1 else btd * lp  # reshape for bmm: a view only then
            attn = qk + v + probs + mask
        mlp = 2 * b * t * f * lp + b * t * f * lp + b * t * f * lp  # up out, silu(a), down in
        per_block = 2 * norm + matmul_inputs + attn + mlp
        model = b * t * INT64 + t * spec.head_dim * FP32  # token ids; RoPE cos and sin [T, hd/2]
    else:
        norm = btd * FP32 + 2 * b * t * FP32  # input, mean, rstd
        if attention == "sdpa":
            # q, k, v are views of the qkv buffer; the output is laid out so merging heads is a view
            attn = 3 * btd * lp + btd * lp + lse
            matmul_inputs = 2 * btd * lp  # qkv in, MLP up in (out's input is the sdpa output)
        else:
            attn = 3 * btd * lp + probs + mask  # q, k, v copied for bmm (or one qkv view: same bytes)
            matmul_inputs = 3 * btd * lp
        mlp = 2 * b * t * f * lp  # GELU in and out
        per_block = 2 * norm + matmul_inputs + attn + mlp
        model = b * t * INT64 + t * INT64  # token ids, position ids
    final = norm + btd * lp  # final norm, LM-head input
    loss = b * t * spec.vocab_size * FP32 + b * t * INT64 + FP32  # log-probs, targets, total weight
    return spec.num_layers * per_block + model + final + loss


def kv_positions(prompt: int, new_tokens: int) -> int:
    """Positions generate writes to the KV cache: the prompt's (prefill) and each fed-back new token's.
    The first new token is prefill's output and the last is never fed back, so N new tokens add N - 1."""
    return prompt + max(new_tokens - 1, 0)


def memory_breakdown(
    spec: ModelSpec,
    batch: int,
    context: int | None = None,
    precision: str = "fp32",
    *,
    optimizer: str = "adamw",
    mode: str = "train",
    attention: str = "sdpa",
    new_tokens: int = 0,
) -> MemoryBreakdown:
    """The analytic breakdown for `workloads.build_model(spec, attention)` run as the harness runs it.

    `context`: tokens per sequence (the prompt in generate mode); default the spec's context length.
    `new_tokens`: generate mode's new tokens, all but the last of which the KV cache also holds.
    """
    if precision not in COMPUTE_BYTES:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(COMPUTE_BYTES)}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if attention not in ATTENTIONS:
        raise ValueError(f"unknown attention {attention!r}; choose one of {', '.join(ATTENTIONS)}")
    context = spec.context_length if context is None else context
    lp = COMPUTE_BYTES[precision]
    params, tensors = param_count(spec)
    train = mode == "train"
    adamw = train and optimizer == "adamw"
    cache_len = kv_positions(context, new_tokens)
    return MemoryBreakdown(
        params=params,
        parameters=params * FP32,
        gradients=params * FP32 if train else 0,
        optimizer_state=2 * params * FP32 + tensors * FP32 if adamw else 0,
        weight_copies=matmul_weights(spec) * lp if precision != "fp32" else 0,
        activations=activation_bytes(spec, batch, context, precision, attention) if train else 0,
        kv_cache=2 * spec.num_layers * batch * spec.num_heads * cache_len * spec.head_dim * lp
        if mode == "generate"
        else 0,
    )
