"""GPT-2 as in nanoGPT: LayerNorm with bias, GELU MLP, learned positions, biased linears, tied LM head."""

from __future__ import annotations

import math

import torch
from torch import nn

from workloads.attention import Attention
from workloads.cache import KVCache, StaticKVCache
from workloads.specs import ModelSpec
from workloads.transformer import MLP, Block


class GPT2(nn.Module):
    def __init__(self, spec: ModelSpec, attention: str = "sdpa") -> None:
        super().__init__()
        self.spec = spec
        d, d_ff = spec.d_model, spec.d_ff
        self.tok_emb = nn.Embedding(spec.vocab_size, d)
        self.pos_emb = nn.Embedding(spec.context_length, d)
        self.blocks = nn.ModuleList(
            Block(
                nn.LayerNorm(d),
                Attention(d, spec.num_heads, i, kind=attention, bias=True),
                nn.LayerNorm(d),
                MLP(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d)),
            )
            for i in range(spec.num_layers)
        )
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, spec.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight

    def forward(self, idx: torch.Tensor, cache: KVCache | StaticKVCache | None = None) -> torch.Tensor:
        """Logits [B, T, vocab] for tokens [B, T]; with a cache, `idx` holds only the new tokens."""
        t = idx.size(1)
        # the last position asked for: a static cache's is on the device, bounded by its size
        end = cache.max_len if isinstance(cache, StaticKVCache) else t + (cache.length if cache else 0)
        if end > self.spec.context_length:
            raise ValueError(f"{self.spec.name} has {self.spec.context_length} positions; asked for {end}")
        pos = torch.arange(t, device=idx.device) if cache is None else cache.positions(t, idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x, None, cache)
        if cache is not None:
            cache.advance(idx.size(1))
        return self.lm_head(self.ln_f(x))

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator) -> None:
        """nanoGPT's init: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 · layers)), zero biases."""
        self.lm_head.weight = self.tok_emb.weight  # re-tie: moving off the meta device unties them
        for module in self.modules():
            if module is self.lm_head:  # tied: initialised as the token embedding
                continue
            if isinstance(module, nn.Linear | nn.Embedding):
                module.weight.normal_(0.0, 0.02, generator=generator)
            if isinstance(module, nn.Linear | nn.LayerNorm) and module.bias is not None:
                module.bias.zero_()
            if isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
        residual_std = 0.02 / math.sqrt(2 * self.spec.num_layers)
        for block in self.blocks:
            block.attn.out.weight.normal_(0.0, residual_std, generator=generator)
            block.mlp.down.weight.normal_(0.0, residual_std, generator=generator)
