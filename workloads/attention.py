"""Causal multi-head self-attention, shared by both families, in two forms.

attention="math" spells the computation out as modules (`scores` → `softmax` → `context`) so each step
can be timed on its own; attention="sdpa" hands q, k, v to torch's fused scaled_dot_product_attention.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from workloads.cache import KVCache, StaticKVCache
from workloads.names import ATTENTIONS


def causal_mask(tq: int, tk: int, device: torch.device) -> torch.Tensor:
    """[tq, tk] bool, True where allowed: the queries are the last `tq` of `tk` positions."""
    return torch.ones(tq, tk, dtype=torch.bool, device=device).tril(diagonal=tk - tq)


class Rotary(nn.Module):
    """RoPE angle tables (rotate-half convention) for positions start … start + length - 1."""

    def __init__(self, head_dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RoPE needs an even head dimension, got {head_dim}")
        self.head_dim = head_dim
        self.theta = theta
        self.register_buffer("inv_freq", torch.empty(head_dim // 2), persistent=False)
        self.reset()

    @torch.no_grad()
    def reset(self) -> None:
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.float32, device=self.inv_freq.device)
        self.inv_freq.copy_(self.theta ** (-exponents / self.head_dim))

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [len(positions), head_dim / 2] of the angles at `positions` (a device tensor, so a
        captured step reads the position it is at)."""
        angles = torch.outer(positions.to(torch.float32), self.inv_freq)
        return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).type_as(x)


class Scores(nn.Module):
    """Q·Kᵀ · scale, with future positions (or those `mask` hides) set to -inf."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        scores = (q @ k.transpose(-2, -1)) * self.scale
        tq, tk = q.size(-2), k.size(-2)
        if mask is not None:  # a static cache: every position is there, the unfilled ones hidden
            scores = scores.masked_fill(~mask, float("-inf"))
        elif tq > 1:  # a single query is the newest position: it may see every key
            scores = scores.masked_fill(~causal_mask(tq, tk, scores.device), float("-inf"))
        return scores


class Context(nn.Module):
    """Attention probabilities · V."""

    def forward(self, probs: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return probs @ v


class SDPA(nn.Module):
    """torch's fused causal attention; the mask follows from how many queries and keys there are."""

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        tq, tk = q.size(-2), k.size(-2)
        if mask is not None:  # a static cache: [tq, max_len], True where a query sees a key
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if tq == 1:
            return F.scaled_dot_product_attention(q, k, v)
        if tq == tk:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        # queries after cached keys: is_causal would align the mask top-left, so spell it out
        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(tq, tk, q.device))


class Attention(nn.Module):
    """Fused qkv projection → (RoPE) → causal attention over the cache and the new tokens → out projection."""

    def __init__(self, d_model: int, num_heads: int, layer: int, *, kind: str, bias: bool) -> None:
        super().__init__()
        if kind not in ATTENTIONS:
            raise ValueError(f"unknown attention {kind!r}; choose one of {', '.join(ATTENTIONS)}")
        if d_model % num_heads:
            raise ValueError(f"d_model {d_model} is not a multiple of num_heads {num_heads}")
        self.num_heads = num_heads
        self.layer = layer
        self.kind = kind
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        if kind == "math":
            self.scores = Scores((d_model // num_heads) ** -0.5)
            self.softmax = nn.Softmax(dim=-1)
            self.context = Context()
        else:
            self.sdpa = SDPA()
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache: KVCache | StaticKVCache | None = None,
    ) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.num_heads, d // self.num_heads).permute(2, 0, 3, 1, 4)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        mask = None
        if cache is not None:
            k, v, mask = cache.update(self.layer, k, v)
        if self.kind == "sdpa":
            y = self.sdpa(q, k, v, mask)
        else:
            y = self.context(self.softmax(self.scores(q, k, mask)), v)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


def math_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """softmax(Q·Kᵀ/√d)·V in plain ops, as attention="math" computes it; q, k, v are [..., T, head_dim]."""
    scores = (q @ k.transpose(-2, -1)) * q.size(-1) ** -0.5
    if causal:
        scores = scores.masked_fill(~causal_mask(q.size(-2), k.size(-2), q.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """torch's fused scaled_dot_product_attention (the backend torch picks for the device and dtype)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
