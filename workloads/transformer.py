"""TransformerLM: pre-norm decoder blocks with RMSNorm, RoPE, causal attention and a SwiGLU feed-forward.

No biases, untied token embedding and LM head. `Block` and `MLP` are shared with the GPT-2 family.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from workloads.attention import Attention, Rotary
from workloads.cache import KVCache, StaticKVCache
from workloads.specs import ModelSpec


class RMSNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()  # the mean of squares overflows or loses precision in 16-bit types
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


class SwiGLU(nn.Module):
    """silu(a) · b on the two halves of the fused up projection."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=-1)
        return F.silu(a) * b


class MLP(nn.Module):
    def __init__(self, up: nn.Linear, act: nn.Module, down: nn.Linear) -> None:
        super().__init__()
        self.up = up
        self.act = act
        self.down = down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class Block(nn.Module):
    """x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, ln_1: nn.Module, attn: Attention, ln_2: nn.Module, mlp: MLP) -> None:
        super().__init__()
        self.ln_1 = ln_1
        self.attn = attn
        self.ln_2 = ln_2
        self.mlp = mlp

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache: KVCache | StaticKVCache | None = None,
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), rope, cache)
        return x + self.mlp(self.ln_2(x))


class TransformerLM(nn.Module):
    def __init__(self, spec: ModelSpec, attention: str = "sdpa") -> None:
        super().__init__()
        self.spec = spec
        d, d_ff = spec.d_model, spec.d_ff
        self.tok_emb = nn.Embedding(spec.vocab_size, d)
        self.rope = Rotary(spec.head_dim)
        self.blocks = nn.ModuleList(
            Block(
                RMSNorm(d),
                Attention(d, spec.num_heads, i, kind=attention, bias=False),
                RMSNorm(d),
                MLP(nn.Linear(d, 2 * d_ff, bias=False), SwiGLU(), nn.Linear(d_ff, d, bias=False)),
            )
            for i in range(spec.num_layers)
        )
        self.ln_f = RMSNorm(d)
        self.lm_head = nn.Linear(d, spec.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, cache: KVCache | StaticKVCache | None = None) -> torch.Tensor:
        """Logits [B, T, vocab] for tokens [B, T]; with a cache, `idx` holds only the new tokens."""
        t = idx.size(1)
        positions = torch.arange(t, device=idx.device) if cache is None else cache.positions(t, idx.device)
        x = self.tok_emb(idx)
        rope = self.rope(positions)
        for block in self.blocks:
            x = block(x, rope, cache)
        if cache is not None:
            cache.advance(idx.size(1))
        return self.lm_head(self.ln_f(x))

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator) -> None:
        """Truncated normals (±3σ): σ = sqrt(2 / (fan_in + fan_out)) for linears, 1 for the embedding."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                std = math.sqrt(2 / (module.in_features + module.out_features))
                nn.init.trunc_normal_(module.weight, 0.0, std, -3 * std, 3 * std, generator=generator)
            elif isinstance(module, nn.Embedding):
                nn.init.trunc_normal_(module.weight, 0.0, 1.0, -3.0, 3.0, generator=generator)
            elif isinstance(module, RMSNorm):
                module.weight.fill_(1.0)
        self.rope.reset()
