"""Plain-PyTorch LLM workloads: model sizes, the models, synthetic data, KV caches (growing and static, with
a decode step a CUDA graph can replay: workloads.decode), FLOP formulas.

No profiler code lives here; the harness times these models from outside and hooks NVTX ranges onto
submodules by the names in DETAIL_RANGES.
"""

from __future__ import annotations

import torch
from torch import nn

from workloads import flops, memory, peak
from workloads.cache import KVCache, StaticKVCache, new_cache, new_static_cache
from workloads.data import loss_fn, synthetic_batch
from workloads.gpt2 import GPT2
from workloads.specs import MODEL_NAMES, ModelSpec, get_spec
from workloads.transformer import TransformerLM

__all__ = [
    "DETAIL_RANGES",
    "GPT2",
    "MODEL_NAMES",
    "OUTER_RANGES",
    "KVCache",
    "ModelSpec",
    "StaticKVCache",
    "TransformerLM",
    "build_model",
    "count_params",
    "flops",
    "get_spec",
    "loss_fn",
    "memory",
    "new_cache",
    "new_static_cache",
    "peak",
    "synthetic_batch",
]

# Submodule-name suffix (under blocks.N) → NVTX range name, for the harness's --nvtx-detail hooks.
DETAIL_RANGES: dict[str, str] = {
    "attn": "attention",
    "attn.qkv": "qkv_proj",
    "attn.scores": "qk_scores",
    "attn.softmax": "softmax",
    "attn.context": "attn_v",
    "attn.sdpa": "sdpa",
    "attn.out": "out_proj",
    "mlp": "mlp",
    "mlp.up": "mlp_up",
    "mlp.act": "mlp_act",
    "mlp.down": "mlp_down",
}
# The pieces outside attention and the MLP that are modules of their own: submodule name (the last part of
# its qualified name, anywhere in the model) → range name. Together with DETAIL_RANGES they leave only the
# residual adds, RoPE and the loss untimed.
OUTER_RANGES: dict[str, str] = {
    "tok_emb": "embedding",
    "pos_emb": "embedding",
    "ln_1": "norm",
    "ln_2": "norm",
    "ln_f": "norm",
    "lm_head": "lm_head",
}


def build_model(spec: ModelSpec, attention: str = "sdpa", seed: int = 0) -> nn.Module:
    """The model for `spec` on the CPU, initialised from `seed` alone (the global RNG is left untouched)."""
    cls = TransformerLM if spec.family == "transformer" else GPT2
    # Built on the meta device so the weights are written once, by init_weights, not also by nn defaults.
    with torch.device("meta"):
        model = cls(spec, attention)
    model.to_empty(device="cpu")
    model.init_weights(torch.Generator().manual_seed(seed))
    return model


def count_params(model: nn.Module) -> int:
    """Parameters, each shared tensor (the tied GPT-2 LM head) counted once."""
    return sum(p.numel() for p in model.parameters())
