"""Does the harness's own instrumentation slow the work? `harness run`'s loop against the same loop bare.

Both run in this process, interleaved round by round, in ABBA order (harness, bare, bare, harness, …) so
drift in the machine's speed and any advantage of going first or second hit both alike. Each step's wall
time is taken from one step end to the next, so everything the harness adds per step (synchronisation, NVTX
push/pop, clock reads, records) is inside it. Then, since a 2-core shared machine's noise (±3%) hides
anything smaller, the instrumentation alone: a step range and three timed phases around nothing.

    .venv/bin/python benchmarks/run_overhead.py [--model tiny] [--rounds 4] [--steps 6] [--warmup 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import workloads
from harness.core.records import RunConfig
from harness.execution.runner import run_workload


def harness_round(config: RunConfig) -> list[int]:
    ends: list[int] = []
    run_workload(config, progress=lambda done, total: ends.append(time.perf_counter_ns()))
    return [b - a for a, b in zip(ends[config.warmup :], ends[config.warmup + 1 :], strict=False)]


def bare_round(config: RunConfig) -> list[int]:
    spec = workloads.get_spec(config.model)
    torch.manual_seed(config.seed)
    model = workloads.build_model(spec, attention=config.attention, seed=config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    x, y = workloads.synthetic_batch(
        spec, config.batch_size, spec.context_length, device="cpu", generator=gen
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model.train()
    ends: list[int] = []
    for _ in range(config.warmup + config.steps):
        loss = workloads.loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        ends.append(time.perf_counter_ns())
    return [b - a for a, b in zip(ends[config.warmup :], ends[config.warmup + 1 :], strict=False)]


def instrumentation_ns(device: torch.device, steps: int = 20_000) -> float:
    """What the harness adds per training step with nothing inside: a `step` range and three timed phases."""
    from harness.core import nvtx_ranges
    from harness.execution.timing import PhaseClock

    clock = PhaseClock(device)
    t0 = time.perf_counter_ns()
    for i in range(steps):
        clock.reset()
        with nvtx_ranges.nvtx_range("step", i):
            for phase in ("forward", "backward", "optimizer"):
                with clock.phase(phase, i):
                    pass
    return (time.perf_counter_ns() - t0) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    config = RunConfig(model=args.model, device="cpu", warmup=args.warmup, steps=args.steps)
    harness_steps: list[int] = []
    bare_steps: list[int] = []
    for r in range(args.rounds):
        if r % 2 == 0:
            harness_steps += harness_round(config)
            bare_steps += bare_round(config)
        else:
            bare_steps += bare_round(config)
            harness_steps += harness_round(config)
        print(
            f"round {r + 1}/{args.rounds}: harness {statistics.median(harness_steps) / 1e6:.2f} ms, "
            f"bare {statistics.median(bare_steps) / 1e6:.2f} ms (medians so far)",
            flush=True,
        )
    h_med, b_med = statistics.median(harness_steps), statistics.median(bare_steps)
    h_mean, b_mean = statistics.fmean(harness_steps), statistics.fmean(bare_steps)
    print(
        f"\n{args.model} on cpu, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{len(harness_steps)} steps each"
    )
    print(f"{'':8}{'median ms':>12}{'mean ms':>12}")
    print(f"{'harness':8}{h_med / 1e6:12.2f}{h_mean / 1e6:12.2f}")
    print(f"{'bare':8}{b_med / 1e6:12.2f}{b_mean / 1e6:12.2f}")
    print(f"ratio harness/bare: median {h_med / b_med:.4f}, mean {h_mean / b_mean:.4f}")
    added = instrumentation_ns(torch.device("cpu"))
    print(
        f"instrumentation alone (step range + 3 timed phases, empty): {added / 1e3:.1f} us per step "
        f"= {added / b_med * 100:.4f}% of a bare step"
    )


if __name__ == "__main__":
    main()
