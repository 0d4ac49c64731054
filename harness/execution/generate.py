"""Generate mode: prefill a prompt, then decode one token at a time (greedy), each token timed in its own
NVTX range; and the serving figures of the measured steps.

Three decode paths, one step shape (prefill phase, then decode phase of new_tokens - 1 tokens; none of
0 tokens, with --new-tokens 1, the first token being prefill's: its decode path is then NO_DECODE):

- eager (the default): a KV cache that grows a position per token (workloads.KVCache); shapes change at
  every token, so nothing can be replayed.
- `--cuda-graphs` (CUDA only): a static KV cache of prompt + new tokens - 1 positions written in place, one
  decode step captured once as a CUDA graph before the first step and replayed per token
  (workloads.decode.StaticDecode.capture).
- `--compile`: the same static step handed to torch.compile, `mode="reduce-overhead"` on CUDA (Inductor's
  CUDA graphs), the default mode elsewhere; it compiles in the warm-up steps.

Prefill is eager on every path. The serving figures (`serving_figures`) are those serving engines report:
time to first token (TTFT: the prefill phase, which ends with the first token chosen), time per output
token (TPOT: each decoded token's own time, harness.execution.timing.TokenClock, over every token of the
measured steps), output tokens per second, the concurrent sequences (the batch), and the KV cache's bytes
as allocated beside workloads.memory's analytic figure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.execution.body import Body, autocast
from harness.execution.timing import PhaseClock, TokenClock
from workloads.names import DECODE, NO_DECODE, PERCENTILE_SAMPLES, PREFILL

if TYPE_CHECKING:
    from harness.core.records import RunConfig, RunResult

import workloads
from workloads import memory as workload_memory

EAGER = "eager (growing KV cache)"


def prompt_length(config: RunConfig, spec: Any) -> int:
    """Generate mode's prompt: --context-length if given, else 64 tokens (capped by the model)."""
    if config.context_length:
        return config.context_length
    return min(64, spec.context_length // 2)


def generate_body(config: RunConfig, spec: Any, model: Any, device: Any, prompt_len: int) -> Body:
    """The generate step on the path the configuration asks for (see the module's docstring)."""
    import torch

    gen = torch.Generator().manual_seed(config.seed)
    prompt, _ = workloads.synthetic_batch(spec, config.batch_size, prompt_len, device=device, generator=gen)
    model.eval()
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[config.precision]
    max_len = workload_memory.kv_positions(prompt_len, config.new_tokens)
    cache_dtype = dtype or torch.float32
    n = config.new_tokens
    clock_tokens = TokenClock(device, n - 1)
    analytic = workload_memory.memory_breakdown(
        spec, config.batch_size, prompt_len, config.precision, mode="generate", optimizer="none",
        attention=config.attention, new_tokens=n,
    ).kv_cache  # fmt: skip
    figures: dict[str, Any] = {"kv_cache_analytic_bytes": analytic}

    if config.cuda_graphs or config.compile:
        cache = workloads.new_static_cache(
            model, config.batch_size, max_len, device=device, dtype=cache_dtype
        )
        static = workloads.decode.StaticDecode(
            model, cache, config.batch_size, workloads.decode.static_autocast(device, dtype)
        )
        if config.cuda_graphs:
            static.capture()
        else:
            static.compile("reduce-overhead" if device.type == "cuda" else None)
        figures.update(decode=static.how, kv_cache_bytes=cache.nbytes)

        def static_step(i: int, clock: PhaseClock, _: Any) -> None:
            with clock.phase(PREFILL, i):
                static.prefill(prompt)
            if n == 1:  # the first token is prefill's: nothing to decode, no phase to time
                return
            with clock.phase(DECODE, i):
                clock_tokens.start()
                for k in range(1, n):
                    with clock_tokens.token(k):
                        static.decode()
            clock.tokens = clock_tokens.durations()

        return Body(static_step, context=torch.no_grad(), figures=figures)

    figures["decode"] = EAGER if n > 1 else NO_DECODE

    def new_cache() -> Any:
        cache = workloads.new_cache(model, config.batch_size, max_len, device=device, dtype=cache_dtype)
        figures["kv_cache_bytes"] = cache.nbytes
        return cache

    def step(i: int, clock: PhaseClock, cache: Any) -> None:
        with clock.phase(PREFILL, i), autocast(device, config.precision):
            logits = model(prompt, cache=cache)
            token = logits[:, -1].argmax(dim=-1, keepdim=True)
        if n == 1:
            return
        with clock.phase(DECODE, i), autocast(device, config.precision):
            clock_tokens.start()
            for k in range(1, n):
                with clock_tokens.token(k):
                    logits = model(token, cache=cache)
                    token = logits[:, -1].argmax(dim=-1, keepdim=True)
        clock.tokens = clock_tokens.durations()

    return Body(step, prepare=new_cache, context=torch.no_grad(), figures=figures)


def latency_stats(values: list[int]) -> dict[str, float | None] | None:
    """count, mean, p50, p90, p99 (linear between order statistics, as numpy's percentile), min, max; a
    percentile of fewer values than PERCENTILE_SAMPLES asks (p90: 10, p99: 100) is None, not measured."""
    import numpy as np

    if not values:
        return None
    x = np.asarray(values, dtype=np.float64)
    out: dict[str, float | None] = {"count": len(values), "mean_ns": float(x.mean())}
    out.update(
        {
            f"p{q}_ns": float(np.percentile(x, q)) if len(values) >= least else None
            for q, least in PERCENTILE_SAMPLES.items()
        }
    )
    out.update(min_ns=float(x.min()), max_ns=float(x.max()))
    return out


def serving_figures(result: RunResult, figures: dict[str, Any]) -> dict[str, Any] | None:
    """TTFT, TPOT, output tokens/s, decode tokens/s and concurrent sequences of the measured steps, with
    the body's `figures` (decode path, KV cache bytes); None without a measured step. The decode path of
    --new-tokens 1 is known without the body (NO_DECODE): a run whose worker died says it as one that
    finished does."""
    config = result.config
    b, n = config.batch_size, config.new_tokens
    # a whole step: its prefill, and its decode unless there was nothing to decode (--new-tokens 1)
    measured = [
        s for s in result.steps if not s.warmup and PREFILL in s.phases and (DECODE in s.phases or n == 1)
    ]
    if not measured:
        return None
    tokens = [ns for s in measured for ns in s.tokens]
    tpot = latency_stats(tokens)
    total_ns = sum(s.phases[PREFILL] + s.phases.get(DECODE, 0) for s in measured)
    return {
        "concurrent_sequences": b,
        "new_tokens": n,
        "ttft_ns": latency_stats([s.phases[PREFILL] for s in measured]),
        "tpot_ns": tpot,
        "output_tokens_per_s": b * n * len(measured) / (total_ns / 1e9) if total_ns else None,
        "decode_tokens_per_s": b / (tpot["mean_ns"] / 1e9) if tpot and tpot["mean_ns"] else None,
        **({"decode": NO_DECODE} if n == 1 else {}),
        **figures,
    }
