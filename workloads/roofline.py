"""Analytic FLOPs and minimum bytes moved per sub-block, forward and backward, for both model families.

FLOPs. Matmul sub-blocks (qkv_proj, qk_scores, attn_v, sdpa, out_proj, mlp_up, mlp_down, lm_head) are
counted as torch.utils.flop_counter.FlopCounterMode counts them: 2·m·n·k per [m, k] × [k, n] product, bias
adds not counted, causal attention over the full square; backward is the input-gradient and the
weight-gradient product (2× forward), and the fused sdpa backward is the five products FlopCounterMode
charges the flash/efficient kernels (it recomputes Q·Kᵀ: 2.5× forward). Element-wise sub-blocks (embedding,
norm, rope, softmax, mlp_act, residual, loss, optimizer) get an analytic count that FlopCounterMode does not
make: one FLOP per add, multiply, compare, exp, erf, rsqrt or divide on each element (the per-element
counts are the *_FLOPS constants below, derived in docs/roofline.md). MFU uses the matmul FLOPs only.

Bytes: the least traffic to and from memory of the kernels PyTorch runs for that sub-block, each reading its
inputs once and writing its outputs once: activations, weights and gradients at the precision's element
size (fp32 4 B, bf16/fp16 2 B), token ids int64, softmax/loss statistics fp32, AdamW state fp32 whatever the
precision. Autocast's weight casts and fp32 upcasts, and caching, are not in it: real kernels move at least
this much, so a bytes/s computed from it is a lower bound.

Sub-block names are the --nvtx-detail range names where one exists (workloads.DETAIL_RANGES), so
per-range times join onto these rows by name. Totals are for the whole model (all layers), one step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workloads import memory
from workloads.names import ATTENTIONS, DECODE, MODES, PREFILL
from workloads.specs import ModelSpec

if TYPE_CHECKING:
    import pandas as pd

SUBBLOCKS = (
    "embedding",
    "norm",
    "qkv_proj",
    "rope",
    "qk_scores",
    "softmax",
    "attn_v",
    "sdpa",
    "out_proj",
    "mlp_up",
    "mlp_act",
    "mlp_down",
    "residual",
    "lm_head",
    "loss",
    "optimizer",
)
MATMUL_SUBBLOCKS = frozenset(
    {"qkv_proj", "qk_scores", "attn_v", "sdpa", "out_proj", "mlp_up", "mlp_down", "lm_head"}
)
PASSES = {"forward": 0, "backward": 1, "optimizer": 2, PREFILL: 3, DECODE: 4}
COLUMNS = ["sub-block", "pass", "kind", "flops", "bytes", "intensity"]
ID_BYTES = 8  # int64 token ids and targets
STAT_BYTES = 4  # fp32 per-row statistics (log-sum-exp)

# FLOPs per element, forward / backward (docs/roofline.md derives each)
RMSNORM_FLOPS = (4, 9)
LAYERNORM_FLOPS = (7, 13)
ROPE_FLOPS = (3, 3)
SOFTMAX_FLOPS = (5, 4)
SWIGLU_FLOPS = (6, 12)  # per output element of silu(a) · b
GELU_FLOPS = (5, 11)  # exact (erf) GELU, nn.GELU's default
CROSS_ENTROPY_FLOPS = (4, 3)  # per logit
ADAMW_FLOPS = 14  # per parameter
ADAMW_BYTES = 28  # per parameter: read p, grad, m, v; write p, m, v; fp32


def param_count(spec: ModelSpec) -> int:
    """Parameters of the model `spec` builds (the tied GPT-2 head counted once: workloads.memory's count)."""
    return memory.param_count(spec)[0]


def _linear(tokens: int, n_in: int, n_out: int, count: int, bias: bool, s: int) -> tuple[int, ...]:
    """(forward FLOPs, forward bytes, backward FLOPs, backward bytes) of `count` linears x·Wᵀ (+ b)."""
    flops = 2 * tokens * n_in * n_out
    fwd = tokens * n_in + n_in * n_out + tokens * n_out + (n_out if bias else 0)
    grad_input = tokens * n_out + n_in * n_out + tokens * n_in  # read dY, W; write dX
    grad_weight = tokens * n_in + tokens * n_out + n_in * n_out  # read X, dY; write dW
    grad_bias = tokens * n_out + n_out if bias else 0  # read dY; write db
    grads = grad_input + grad_weight + grad_bias
    return count * flops, count * fwd * s, count * 2 * flops, count * grads * s


def subblock_costs(
    spec: ModelSpec,
    batch: int,
    seq: int,
    precision: str = "fp32",
    mode: str = "train",
    *,
    attention: str = "math",
    new_tokens: int = 32,
) -> pd.DataFrame:
    """FLOPs and minimum bytes of every sub-block for one step of [batch, seq] tokens.

    Columns: sub-block, pass (the phase it runs in: forward | backward | optimizer; generate: prefill |
    decode), kind (matmul | elementwise), flops, bytes, intensity (FLOPs per byte). `mode` "forward" has no
    loss, backward or optimizer rows; "generate" is a prompt of `seq` tokens through the model (prefill),
    then `new_tokens` - 1 decoded tokens one at a time, each attending to the prompt and the tokens before it
    in the KV cache (decode: the sum over those tokens; every weight read once per token). `attention`
    "math" has qk_scores / softmax / attn_v, "sdpa" one fused sdpa row.
    """
    import pandas as pd

    for name, value, allowed in (
        ("precision", precision, tuple(memory.COMPUTE_BYTES)),
        ("mode", mode, MODES),
        ("attention", attention, ATTENTIONS),
    ):
        if value not in allowed:
            raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(allowed)}")
    if batch <= 0 or seq <= 0:
        raise ValueError(f"batch and sequence length must be positive, got {batch} and {seq}")
    s = memory.COMPUTE_BYTES[precision]
    out = []
    if mode == "generate":
        if new_tokens < 1:
            raise ValueError(f"new tokens must be positive, got {new_tokens}")
        for name, f_flops, f_bytes, _, _ in _rows(spec, batch, seq, seq, s, attention):
            out.append((name, PREFILL, f_flops, f_bytes))
        decode: dict[str, list[int]] = {}
        for k in range(1, new_tokens):  # token k attends to the prompt and k cached tokens (itself last)
            for name, f_flops, f_bytes, _, _ in _rows(spec, batch, 1, seq + k, s, attention):
                total = decode.setdefault(name, [0, 0])
                total[0] += f_flops
                total[1] += f_bytes
        out += [(name, DECODE, f, b) for name, (f, b) in decode.items()]
    for name, f_flops, f_bytes, b_flops, b_bytes in _rows(spec, batch, seq, seq, s, attention):
        if mode == "generate":
            break
        out.append((name, "forward", f_flops, f_bytes))
        if mode == "train":
            out.append((name, "backward", b_flops, b_bytes))
    if mode == "train":
        n, nv = batch * seq, batch * seq * spec.vocab_size
        # forward: log-sum-exp per row, then mean(lse - logit[target]); backward: (softmax - onehot) / n
        out.append(("loss", "forward", CROSS_ENTROPY_FLOPS[0] * nv + 3 * n,
                    nv * s + n * (ID_BYTES + STAT_BYTES) + STAT_BYTES))  # fmt: skip
        out.append(("loss", "backward", CROSS_ENTROPY_FLOPS[1] * nv + n,
                    2 * nv * s + n * (ID_BYTES + STAT_BYTES)))  # fmt: skip
        p = param_count(spec)
        out.append(("optimizer", "optimizer", ADAMW_FLOPS * p, ADAMW_BYTES * p))
    df = pd.DataFrame(out, columns=["sub-block", "pass", "flops", "bytes"])
    df.insert(2, "kind", ["matmul" if x in MATMUL_SUBBLOCKS else "elementwise" for x in df["sub-block"]])
    df["intensity"] = df["flops"] / df["bytes"]
    order = {name: i for i, name in enumerate(SUBBLOCKS)}
    df = df.sort_values(by=["pass", "sub-block"], key=lambda c: c.map(PASSES if c.name == "pass" else order))
    return df.reset_index(drop=True)[COLUMNS]


def _rows(
    spec: ModelSpec, b: int, t: int, t_kv: int, s: int, attention: str
) -> list[tuple[str, int, int, int, int]]:
    """(sub-block, forward FLOPs, forward bytes, backward FLOPs, backward bytes) of the model over `t` new
    tokens per sequence attending to `t_kv` keys (t_kv = t: a whole sequence; 1 and the cache's length:
    one decoded token)."""
    gpt2 = spec.family == "gpt2"
    d, f, layers, heads, vocab = spec.d_model, spec.d_ff, spec.num_layers, spec.num_heads, spec.vocab_size
    n = b * t  # tokens
    nd = n * d
    kv = b * t_kv * d  # the keys (or values) of one layer, all heads
    scores = b * heads * t * t_kv  # elements of one layer's attention matrix
    rows: list[tuple[str, int, int, int, int]] = []  # name, fwd flops, fwd bytes, bwd flops, bwd bytes

    # embedding: gather rows (GPT-2 adds the learned positions); backward scatters into a dense table grad
    pos = t * d if gpt2 else 0
    rows.append((
        "embedding",
        nd if gpt2 else 0,
        n * ID_BYTES + (2 * nd + pos) * s,
        nd + (nd if gpt2 else 0),
        n * ID_BYTES + (nd + vocab * d + (nd + pos if gpt2 else 0)) * s,
    ))  # fmt: skip

    norms = 2 * layers + 1
    per_elem = LAYERNORM_FLOPS if gpt2 else RMSNORM_FLOPS
    params = 2 * d if gpt2 else d  # weight (and bias)
    rows.append((
        "norm",
        norms * per_elem[0] * nd,
        norms * (2 * nd + params) * s,
        norms * per_elem[1] * nd,
        norms * (3 * nd + 2 * params) * s,
    ))  # fmt: skip

    rows.append(("qkv_proj", *_linear(n, d, 3 * d, layers, gpt2, s)))
    if not gpt2:  # RoPE on q and k
        qk = 2 * nd
        tables = 2 * t * (spec.head_dim // 2) * STAT_BYTES  # cos, sin in fp32
        rows.append(("rope", layers * ROPE_FLOPS[0] * qk, layers * (2 * qk * s + tables),
                     layers * ROPE_FLOPS[1] * qk, layers * (2 * qk * s + tables)))  # fmt: skip

    product = 2 * b * t * t_kv * d  # one attention matmul (all heads), one layer
    if attention == "math":
        rows.append(("qk_scores", layers * product, layers * (nd + kv + scores) * s,
                     layers * 2 * product, layers * (2 * scores + 2 * nd + 2 * kv) * s))  # fmt: skip
        rows.append(("softmax", layers * SOFTMAX_FLOPS[0] * scores, layers * 2 * scores * s,
                     layers * SOFTMAX_FLOPS[1] * scores, layers * 3 * scores * s))  # fmt: skip
        rows.append(("attn_v", layers * product, layers * (scores + kv + nd) * s,
                     layers * 2 * product, layers * (2 * scores + 2 * nd + 2 * kv) * s))  # fmt: skip
    else:
        lse = b * heads * t * STAT_BYTES
        rows.append(("sdpa", layers * 2 * product, layers * ((2 * nd + 2 * kv) * s + lse),
                     layers * 5 * product, layers * ((4 * nd + 4 * kv) * s + lse)))  # fmt: skip

    rows.append(("out_proj", *_linear(n, d, d, layers, gpt2, s)))
    up_out = f if gpt2 else 2 * f  # SwiGLU's up projection is fused: both halves at once
    rows.append(("mlp_up", *_linear(n, d, up_out, layers, gpt2, s)))
    act = GELU_FLOPS if gpt2 else SWIGLU_FLOPS
    nf = n * f
    act_fwd_bytes = 2 * nf if gpt2 else 3 * nf  # GELU: x in, y out; SwiGLU: a, b in, y out
    act_bwd_bytes = 3 * nf if gpt2 else 5 * nf  # GELU: x, dy in, dx out; SwiGLU: a, b, dy in, da, db out
    rows.append(("mlp_act", layers * act[0] * nf, layers * act_fwd_bytes * s,
                 layers * act[1] * nf, layers * act_bwd_bytes * s))  # fmt: skip
    rows.append(("mlp_down", *_linear(n, f, d, layers, gpt2, s)))
    residual = 2 * layers  # x + attn(…), x + mlp(…): backward adds the branch's gradient to the skip's
    rows.append(("residual", residual * nd, residual * 3 * nd * s, residual * nd, residual * 3 * nd * s))
    rows.append(("lm_head", *_linear(n, d, vocab, 1, False, s)))
    return rows


def phase_flops(costs: pd.DataFrame, kind: str | None = "matmul") -> dict[str, int]:
    """FLOPs per phase (forward, backward, optimizer; prefill, decode) of one step: matmul FLOPs by default
    (MFU's count), or every sub-block's with kind=None."""
    rows = costs if kind is None else costs[costs["kind"] == kind]
    return {str(k): int(v) for k, v in rows.groupby("pass", sort=False)["flops"].sum().items()}
