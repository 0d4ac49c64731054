"""Model sizes: the TransformerLM table (d_model, d_ff, layers, heads) and the GPT-2 family."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

Family = Literal["transformer", "gpt2"]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: Family
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    vocab_size: int
    context_length: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def with_overrides(self, vocab_size: int | None = None, context_length: int | None = None) -> ModelSpec:
        """A copy with a different vocabulary or context length; None keeps the current value."""
        return dataclasses.replace(
            self,
            vocab_size=self.vocab_size if vocab_size is None else vocab_size,
            context_length=self.context_length if context_length is None else context_length,
        )


def _transformer(name: str, d_model: int, d_ff: int, num_layers: int, num_heads: int) -> ModelSpec:
    return ModelSpec(
        name, "transformer", d_model, d_ff, num_layers, num_heads, vocab_size=10_000, context_length=128
    )


def _gpt2(name: str, d_model: int, num_layers: int, num_heads: int) -> ModelSpec:
    return ModelSpec(
        name, "gpt2", d_model, 4 * d_model, num_layers, num_heads, vocab_size=50257, context_length=1024
    )


_SPECS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        _transformer("tiny", 512, 1344, 4, 16),
        _transformer("small", 768, 3072, 12, 12),
        _transformer("medium", 1024, 4096, 24, 16),
        _transformer("large", 1280, 5120, 36, 20),
        _transformer("xl", 1600, 6400, 48, 25),
        _transformer("2.7B", 2560, 10240, 32, 32),
        _gpt2("gpt2", 768, 12, 12),
        _gpt2("gpt2-medium", 1024, 24, 16),
        _gpt2("gpt2-large", 1280, 36, 20),
        _gpt2("gpt2-xl", 1600, 48, 25),
        # nanoGPT's shakespeare-char model, scaled down: 65 characters, 64-token context.
        ModelSpec("char", "gpt2", 128, 512, 4, 4, vocab_size=65, context_length=64),
    )
}

MODEL_NAMES: tuple[str, ...] = tuple(_SPECS)


def get_spec(name: str) -> ModelSpec:
    try:
        return _SPECS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(MODEL_NAMES)}") from None
