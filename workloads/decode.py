"""One decoded token at fixed shapes and addresses, run eagerly, replayed from a CUDA graph, or compiled.

`StaticDecode` holds a model, a `StaticKVCache` and two token tensors of its own: `token` (the input,
[batch, 1]) and `next_token` (the output). `step()` runs the model on `token` at the cache's position,
writes the greedy choice into `next_token` and moves the position on, all on the device: the host never
reads a value, so the same kernels on the same addresses run for every token. `decode()` is what a serving
engine does per token: the step (`run`), then `next_token` copied into `token`.

`capture()` records the step once into a `torch.cuda.CUDAGraph`, as vLLM and SGLang do for decode: a few
warm-up steps on a side stream first (cuBLAS handles, autotuning and the caching allocator settle outside
the graph), then the capture; each `decode()` after it is one `replay()` and the copy. `compile()` hands
the step to torch.compile instead (`mode="reduce-overhead"` on CUDA: Inductor's own CUDA graphs), with
the cache and token tensors marked as static addresses so that writing into them does not stop the graphs.

Prefill stays outside: it runs the model eagerly on the prompt with the same cache (see `prefill`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from workloads.cache import StaticKVCache
from workloads.names import CUDA_GRAPH_DECODE

WARMUP_STEPS = 3  # decode steps run on a side stream before a capture (torch.cuda.graphs' advice: a few)

Autocast = Callable[[], contextlib.AbstractContextManager[Any]]


class StaticDecode:
    """Greedy decode of one token per call at static shapes (see the module's docstring).

    `autocast` opens the mixed-precision region around every step (and around the capture: captured with
    its weight-cast cache off, as CUDA graphs need, so each replay casts as the capture did).
    """

    def __init__(
        self, model: nn.Module, cache: StaticKVCache, batch_size: int, autocast: Autocast | None = None
    ) -> None:
        device = cache.pos.device
        self.model = model
        self.cache = cache
        self.autocast = autocast or contextlib.nullcontext
        self.token = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
        self.next_token = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.run: Callable[[], None] = self._eager
        self.how = "eager (static cache)"

    def _step(self) -> None:
        logits = self.model(self.token, cache=self.cache)
        self.next_token.copy_(logits[:, -1].argmax(dim=-1, keepdim=True))

    def _eager(self) -> None:
        with self.autocast():
            self._step()

    def prefill(self, prompt: torch.Tensor) -> None:
        """The prompt through the model from position 0 into the cache; its greedy token into `token`."""
        self.cache.reset()
        with self.autocast():
            logits = self.model(prompt, cache=self.cache)
            self.token.copy_(logits[:, -1].argmax(dim=-1, keepdim=True))

    def decode(self) -> None:
        """One token: the step, then its output made the next step's input."""
        self.run()
        self.token.copy_(self.next_token)

    def capture(self, warmup: int = WARMUP_STEPS) -> None:
        """Record the step into a CUDA graph; `run` replays it from then on. Each warm-up step starts at
        position 0 (a cache of few positions is not run past its end); the capture itself runs nothing.
        The cache is left at position 0 (prefill resets it anyway)."""
        if self.cache.pos.device.type != "cuda":
            raise ValueError(f"a CUDA graph needs a CUDA device, not {self.cache.pos.device.type}")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(side):
            for _ in range(warmup):
                self.cache.reset()
                with self.autocast():
                    self._step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph), self.autocast():
            self._step()
        self.cache.reset()
        torch.cuda.synchronize()
        self.graph = graph
        self.run = graph.replay
        self.how = CUDA_GRAPH_DECODE

    def compile(self, mode: str | None = None) -> None:
        """torch.compile the step (`mode`, e.g. "reduce-overhead"); the first calls compile (warm-up)."""
        cache = self.cache
        for t in (*cache.k, *cache.v, cache.pos, cache.slots, self.token, self.next_token):
            torch._dynamo.mark_static_address(t)
        compiled = torch.compile(self._step, mode=mode, fullgraph=True)

        def run() -> None:
            if mode == "reduce-overhead":  # each call is a new step of Inductor's CUDA graph trees
                torch.compiler.cudagraph_mark_step_begin()
            with self.autocast():
                compiled()

        self.run = run
        self.how = f"torch.compile ({mode or 'default'})"


def static_autocast(device: torch.device, dtype: torch.dtype | None) -> Autocast:
    """The autocast region of a decode step for `dtype` (None: fp32, no region), its cast cache off."""
    if dtype is None:
        return contextlib.nullcontext
    return lambda: torch.autocast(device_type=device.type, dtype=dtype, cache_enabled=False)
