"""Plain-PyTorch LLM workloads: model sizes, the models, synthetic data, KV caches (growing and static, with
a decode step a CUDA graph can replay: workloads.decode), FLOP formulas, and the words a run is
described in (workloads.names).

No profiler code lives here; the harness times these models from outside and hooks NVTX ranges onto
submodules by the names in DETAIL_RANGES. Importing the package loads no torch: each name below is taken
from its module on first use (PEP 562), so `workloads.names` and `workloads.specs` serve a process that
never builds a model (the analysis, `harness --help`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workloads import decode, flops, memory, peak, plants
    from workloads.cache import KVCache, StaticKVCache, new_cache, new_static_cache
    from workloads.data import loss_fn, synthetic_batch
    from workloads.gpt2 import GPT2
    from workloads.models import build_model, count_params
    from workloads.specs import MODEL_NAMES, ModelSpec, get_spec
    from workloads.transformer import TransformerLM

# name -> the module that defines it (a module itself where the two are the same)
_HOMES = {
    "decode": "workloads.decode",
    "flops": "workloads.flops",
    "memory": "workloads.memory",
    "peak": "workloads.peak",
    "plants": "workloads.plants",
    "KVCache": "workloads.cache",
    "new_cache": "workloads.cache",
    "StaticKVCache": "workloads.cache",
    "new_static_cache": "workloads.cache",
    "loss_fn": "workloads.data",
    "synthetic_batch": "workloads.data",
    "GPT2": "workloads.gpt2",
    "build_model": "workloads.models",
    "count_params": "workloads.models",
    "MODEL_NAMES": "workloads.specs",
    "ModelSpec": "workloads.specs",
    "get_spec": "workloads.specs",
    "TransformerLM": "workloads.transformer",
}

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
    "decode",
    "flops",
    "get_spec",
    "loss_fn",
    "memory",
    "new_cache",
    "new_static_cache",
    "peak",
    "plants",
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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'workloads' has no attribute {name!r}")
    module = importlib.import_module(home)
    value = module if home == f"workloads.{name}" else getattr(module, name)
    globals()[name] = value
    return value
