"""The static KV cache and the decode step a CUDA graph replays (workloads.cache, workloads.decode), checked
eagerly on the CPU against the growing cache's decode: the same tokens, the same logits, token for token."""

from __future__ import annotations

import pytest
import torch

import workloads
from workloads.decode import StaticDecode

FAMILIES_AND_KINDS = [("tiny", "math"), ("tiny", "sdpa"), ("char", "math"), ("char", "sdpa")]


@pytest.fixture(scope="module")
def models() -> dict[tuple[str, str], torch.nn.Module]:
    return {
        (n, k): workloads.build_model(workloads.get_spec(n), attention=k).eval()
        for n, k in FAMILIES_AND_KINDS
    }


def growing_decode(model: torch.nn.Module, prompt: torch.Tensor, new: int) -> tuple[list, list]:
    """The eager decode the runner times: a growing cache, greedy; (tokens, last-position logits)."""
    cache = workloads.new_cache(model, prompt.size(0), prompt.size(1) + new)
    logits = model(prompt, cache=cache)[:, -1]
    tokens, seen = [logits.argmax(-1, keepdim=True)], [logits]
    for _ in range(new - 1):
        logits = model(tokens[-1], cache=cache)[:, -1]
        tokens.append(logits.argmax(-1, keepdim=True))
        seen.append(logits)
    return tokens, seen


def static_decode(step: StaticDecode, prompt: torch.Tensor, new: int) -> tuple[list, list]:
    """The same through StaticDecode: prefill, then decode() per token; the logits of each step are read
    back by running the step's model call alongside (a hook on the LM head)."""
    seen: list[torch.Tensor] = []
    hook = step.model.lm_head.register_forward_hook(lambda m, a, out: seen.append(out[:, -1].clone()))
    try:
        step.prefill(prompt)
        tokens = [step.token.clone()]
        for _ in range(new - 1):
            step.decode()
            tokens.append(step.token.clone())
    finally:
        hook.remove()
    return tokens, seen


@pytest.mark.parametrize(("name", "kind"), FAMILIES_AND_KINDS)
def test_the_static_step_decodes_what_the_growing_cache_decodes(models, name: str, kind: str) -> None:
    model = models[name, kind]
    prompt, _ = workloads.synthetic_batch(model.spec, 2, 9, generator=torch.Generator().manual_seed(0))
    new = 8
    with torch.no_grad():
        want_tokens, want_logits = growing_decode(model, prompt, new)
        cache = workloads.new_static_cache(model, 2, 9 + new)
        got_tokens, got_logits = static_decode(StaticDecode(model, cache, 2), prompt, new)
    assert len(got_tokens) == len(want_tokens) == new
    for k, (got, want) in enumerate(zip(got_tokens, want_tokens, strict=True)):
        assert torch.equal(got, want), f"token {k}: {got.tolist()} against {want.tolist()}"
    for got, want in zip(got_logits, want_logits, strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert int(cache.pos) == 9 + new - 1  # the prompt and every decoded token's input are in the cache


@pytest.mark.parametrize("name", ["tiny", "char"])
def test_a_second_generation_reads_none_of_the_first(models, name: str) -> None:
    """The runner prefills the same cache at every step: what an earlier, longer generation left past the
    position is masked, never read."""
    model = models[name, "sdpa"]
    spec = model.spec
    first, _ = workloads.synthetic_batch(spec, 2, 12, generator=torch.Generator().manual_seed(1))
    second, _ = workloads.synthetic_batch(spec, 2, 5, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        step = StaticDecode(model, workloads.new_static_cache(model, 2, 20), 2)
        static_decode(step, first, 8)
        got, _ = static_decode(step, second, 6)
        want, _ = growing_decode(model, second, 6)
    assert [t.tolist() for t in got] == [t.tolist() for t in want]


def test_the_step_keeps_its_shapes_and_addresses(models) -> None:
    """What a graph replays must be where it was captured: the cache's buffers, the position and both token
    tensors stay at their addresses and shapes while decoding moves the position on the device."""
    model = models["tiny", "sdpa"]
    cache = workloads.new_static_cache(model, 3, 16)
    step = StaticDecode(model, cache, 3)
    tensors = [*cache.k, *cache.v, cache.pos, step.token, step.next_token]
    before = [(t.data_ptr(), tuple(t.shape)) for t in tensors]
    prompt, _ = workloads.synthetic_batch(model.spec, 3, 4)
    with torch.no_grad():
        step.prefill(prompt)
        for _ in range(5):
            step.decode()
    assert [(t.data_ptr(), tuple(t.shape)) for t in tensors] == before
    assert cache.k[0].shape == (3, 16, 16, 32) and int(cache.pos) == 4 + 5
    assert cache.nbytes == 2 * 4 * 3 * 16 * 16 * 32 * 4  # K and V, 4 layers, fp32
    assert (
        cache.nbytes
        == workloads.memory.memory_breakdown(
            model.spec, 3, 4, mode="generate", optimizer="none", new_tokens=13
        ).kv_cache  # 4 + 13 - 1: the last new token is not fed back
    )


def test_gpt2_refuses_a_static_cache_past_its_positions(models) -> None:
    model = models["char", "sdpa"]  # 64 learned positions
    cache = workloads.new_static_cache(model, 1, 65)
    with torch.no_grad(), pytest.raises(ValueError, match="64 positions; asked for 65"):
        model(torch.zeros(1, 3, dtype=torch.long), cache=cache)


def test_a_cuda_graph_needs_cuda(models) -> None:
    step = StaticDecode(models["char", "sdpa"], workloads.new_static_cache(models["char", "sdpa"], 1, 8), 1)
    with pytest.raises(ValueError, match="a CUDA graph needs a CUDA device, not cpu"):
        step.capture()


@pytest.mark.slow
def test_the_compiled_step_decodes_what_the_eager_one_does(models) -> None:
    """torch.compile of the static step (fullgraph: the position and the mask are tensors, so one graph
    serves every token) gives the eager step's tokens."""
    model = models["char", "sdpa"]
    prompt, _ = workloads.synthetic_batch(model.spec, 2, 9, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, _ = growing_decode(model, prompt, 6)
        step = StaticDecode(model, workloads.new_static_cache(model, 2, 15), 2)
        step.compile()
        step.prefill(prompt)
        got = [step.token.clone()]
        for _ in range(5):
            step.decode()
            got.append(step.token.clone())
    assert step.how == "torch.compile (default)"
    assert [t.tolist() for t in got] == [t.tolist() for t in want]
