"""Key/value cache for incremental decoding: preallocated per layer, filled in place."""

from __future__ import annotations

import torch
from torch import nn


class KVCache:
    """K and V for every layer, each [batch, heads, max_len, head_dim], plus how many positions are filled.

    A model forward with a cache writes the new tokens' K and V at positions `length …` in every layer,
    then advances `length` once all layers are done.
    """

    def __init__(self, k: list[torch.Tensor], v: list[torch.Tensor]) -> None:
        self.k = k
        self.v = v
        self.length = 0

    @property
    def max_len(self) -> int:
        return self.k[0].size(2)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new [B, H, T, hd] keys and values; return all keys and values so far (views)."""
        end = self.length + k.size(2)
        if end > self.max_len:
            raise ValueError(f"KV cache holds {self.max_len} positions; {end} requested")
        self.k[layer][:, :, self.length : end] = k
        self.v[layer][:, :, self.length : end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def advance(self, n: int) -> None:
        self.length += n


def new_cache(
    model: nn.Module,
    batch_size: int,
    max_len: int,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> KVCache:
    """An empty cache sized for `model` (from `build_model`); `dtype` is the dtype K and V are computed in."""
    spec = model.spec
    shape = (batch_size, spec.num_heads, max_len, spec.head_dim)
    k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(spec.num_layers)]
    v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(spec.num_layers)]
    return KVCache(k, v)
