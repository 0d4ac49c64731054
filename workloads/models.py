"""Building a workload's model: the TransformerLM or GPT-2 of a spec, initialised from a seed alone."""

from __future__ import annotations

import torch
from torch import nn

from workloads.gpt2 import GPT2
from workloads.specs import ModelSpec
from workloads.transformer import TransformerLM


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
