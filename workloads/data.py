"""Synthetic token batches and the language-modelling loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from workloads.specs import ModelSpec


def synthetic_batch(
    spec: ModelSpec,
    batch_size: int,
    length: int,
    *,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens x [B, length] and their next tokens y (x shifted left by one).

    Drawn on the CPU so a seeded generator gives the same batch whatever the device.
    """
    tokens = torch.randint(0, spec.vocab_size, (batch_size, length + 1), generator=generator)
    tokens = tokens.to(device)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy over all tokens, in fp32 whatever the logits' dtype."""
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))
