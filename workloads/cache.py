"""Key/value caches for incremental decoding, each preallocated per layer and filled in place.

`KVCache` tracks the filled length on the host and hands attention the filled positions only, so shapes
grow by one each decoded token (the eager decode). `StaticKVCache` keeps the position in a tensor on the
device and hands attention every position with a mask, so one decoded token is the same kernels on the
same addresses each time: what a CUDA graph (or torch.compile's reduce-overhead mode) needs to replay it.
Both caches answer the model the same three questions: the positions of the new tokens (`positions`),
where to write their keys and values and what to attend to (`update`), and the move past them (`advance`).
"""

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

    @property
    def nbytes(self) -> int:
        """Bytes the cache's tensors hold (every layer's K and V)."""
        return sum(t.nbytes for t in (*self.k, *self.v))

    def positions(self, t: int, device: torch.device) -> torch.Tensor:
        """The positions of `t` new tokens: length … length + t - 1."""
        return torch.arange(self.length, self.length + t, device=device)

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Store the new [B, H, T, hd] keys and values; return all keys and values so far (views) and no
        mask (the queries are the last T of them: attention masks by shape)."""
        end = self.length + k.size(2)
        if end > self.max_len:
            raise ValueError(f"KV cache holds {self.max_len} positions; {end} requested")
        self.k[layer][:, :, self.length : end] = k
        self.v[layer][:, :, self.length : end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end], None

    def advance(self, n: int) -> None:
        self.length += n


class StaticKVCache(nn.Module):
    """K and V for every layer at fixed addresses and shapes, and the next position as a device tensor.

    `update` writes the new keys and values at their positions with `index_copy_` and returns the whole
    buffers with a [T, max_len] mask (key j is seen by the query at position p when j <= p); positions past
    the filled ones hold stale values and are masked out. `advance` adds to the position on the device,
    so a captured decode step moves itself along at every replay. The buffers are a module's, so
    torch.compile treats them as static inputs.
    """

    def __init__(self, k: list[torch.Tensor], v: list[torch.Tensor]) -> None:
        super().__init__()
        for i, (kl, vl) in enumerate(zip(k, v, strict=True)):
            self.register_buffer(f"k{i}", kl, persistent=False)
            self.register_buffer(f"v{i}", vl, persistent=False)
        self.layers = len(k)
        self.register_buffer("pos", torch.zeros(1, dtype=torch.long, device=k[0].device), persistent=False)
        self.register_buffer("slots", torch.arange(k[0].size(2), device=k[0].device), persistent=False)
        self.at: torch.Tensor | None = None  # the new tokens' positions and their mask, set by `positions`
        self.mask: torch.Tensor | None = None

    @property
    def k(self) -> list[torch.Tensor]:
        return [getattr(self, f"k{i}") for i in range(self.layers)]

    @property
    def v(self) -> list[torch.Tensor]:
        return [getattr(self, f"v{i}") for i in range(self.layers)]

    @property
    def max_len(self) -> int:
        return self.slots.size(0)

    @property
    def nbytes(self) -> int:
        """Bytes of every layer's K and V (the position and the slot numbers left out)."""
        return sum(t.nbytes for t in (*self.k, *self.v))

    def reset(self) -> None:
        """Back to position 0 (the stale keys and values stay: they are masked until written again)."""
        self.pos.zero_()

    def positions(self, t: int, device: torch.device) -> torch.Tensor:
        """The positions of `t` new tokens, from the device's position; sets the mask `update` returns."""
        self.at = self.pos + torch.arange(t, device=device)
        self.mask = self.slots[None, :] <= self.at[:, None]
        return self.at

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Write the new [B, H, T, hd] keys and values at their positions; return the whole buffers and the
        mask of the positions `positions` set."""
        assert self.at is not None and self.mask is not None, "positions() comes before update()"
        kl, vl = getattr(self, f"k{layer}"), getattr(self, f"v{layer}")
        kl.index_copy_(2, self.at, k.to(kl.dtype))
        vl.index_copy_(2, self.at, v.to(vl.dtype))
        return kl, vl, self.mask

    def advance(self, n: int) -> None:
        self.pos.add_(n)


def _buffers(
    model: nn.Module, batch_size: int, max_len: int, device: torch.device | str, dtype: torch.dtype
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    spec = model.spec
    shape = (batch_size, spec.num_heads, max_len, spec.head_dim)
    k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(spec.num_layers)]
    v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(spec.num_layers)]
    return k, v


def new_cache(
    model: nn.Module,
    batch_size: int,
    max_len: int,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> KVCache:
    """An empty cache sized for `model` (from `build_model`); `dtype` is the dtype K and V are computed in."""
    return KVCache(*_buffers(model, batch_size, max_len, device, dtype))


def new_static_cache(
    model: nn.Module,
    batch_size: int,
    max_len: int,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> StaticKVCache:
    """An empty static cache sized for `model`: the positions generate writes (workloads.memory.kv_positions),
    every one allocated up front."""
    return StaticKVCache(*_buffers(model, batch_size, max_len, device, dtype))
