"""The attention benchmark: one attention call, forward and backward, over head dim × sequence length.

Every cell builds q, k, v [batch, heads, seq_len, head_dim] in the chosen dtype (no autocast: the dtype is
the precision), runs `warmup` untimed forward+backward calls, then times `trials` more with PhaseClock (the
device synchronised before each clock read, each phase an NVTX range like a run's phases). A cell that runs
out of memory is recorded as OOM and the sweep goes on; every finished cell is handed to `on_cell` at once,
so a sweep cut short keeps what it measured.

Implementations: `math` (QKᵀ, softmax, ·V as separate ops: the seq_len² matrices live in memory), `sdpa`
(torch's fused scaled_dot_product_attention) and `compiled` (torch.compile of `math`, compiled afresh for
every cell with static shapes; that first call, compilation included, is reported as `compile (ns)` and is
not one of the warm-up calls).

Peak memory is measured, never estimated, and how depends on the device (MEMORY_SOURCES): on CUDA the
allocator's high-water mark over the whole cell; on the CPU, where torch keeps no such counter, the
allocations torch's profiler records during one extra, untimed forward+backward, added to the bytes of the
inputs that were live before it. Both include q, k, v and the output gradient.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from harness.core import devices, env
from harness.core.bounds import INT64_MAX, check_count
from harness.core.errors import UsageError, first_line
from harness.core.records import AttentionCell, AttentionConfig, AttentionSweep, new_id
from harness.execution.checks import check_positive
from harness.execution.timing import PhaseClock
from harness.experiments.run_tables import figures
from workloads.memory import COMPUTE_BYTES
from workloads.names import ATTENTION_IMPLS, PRECISIONS

if TYPE_CHECKING:
    import pandas as pd

from workloads import attention as kernels

MEMORY_SOURCES = {
    "cuda": "torch.cuda.max_memory_allocated over the cell, inputs included",
    "cpu": "allocations recorded by torch.profiler in one extra forward+backward, inputs included",
}

AttentionFn = Callable[[Any, Any, Any], Any]

DRAWN_BYTES = 4  # q, k, v and the output gradient are drawn in float32, then cast to the precision
SCORES_IMPLS = ("math", "compiled")  # they hold the [batch, heads, seq_len, seq_len] scores in memory


def _math(causal: bool) -> AttentionFn:
    return partial(kernels.math_attention, causal=causal)


def _sdpa(causal: bool) -> AttentionFn:
    return partial(kernels.sdpa_attention, causal=causal)


def _compiled(causal: bool) -> AttentionFn:
    import torch

    # A fresh compile per cell: with one shared cache, the shapes of a sweep pass dynamo's recompile limit
    # and the later cells would silently run eager.
    torch.compiler.reset()
    return torch.compile(_math(causal), dynamic=False)


# Name → factory(causal) → the attention function one cell times.
FACTORIES: dict[str, Callable[[bool], AttentionFn]] = {"math": _math, "sdpa": _sdpa, "compiled": _compiled}


def new_sweep_id() -> str:
    return new_id("attn")


def validate(config: AttentionConfig) -> None:
    """Raise UsageError for anything a user could have typed wrong, before any work starts."""
    if not config.impls:
        raise UsageError(f"--impl is empty; choose from {', '.join(ATTENTION_IMPLS)} (comma-separated)")
    unknown = [i for i in config.impls if i not in ATTENTION_IMPLS]
    if unknown:
        raise UsageError(f"unknown --impl {','.join(unknown)}; choose from {', '.join(ATTENTION_IMPLS)}")
    if config.precision not in PRECISIONS:
        raise UsageError(f"unknown precision {config.precision!r}; choose one of {', '.join(PRECISIONS)}")
    for name, values in (("--head-dims", config.head_dims), ("--seq-lens", config.seq_lens)):
        if not values or any(v <= 0 for v in values):
            raise UsageError(f"{name} takes positive integers, got {','.join(map(str, values)) or '(none)'}")
    check_positive({"--batch": config.batch_size, "--heads": config.num_heads, "--trials": config.trials})
    if config.warmup < 0:
        raise UsageError(f"--warmup must be 0 or more, got {config.warmup}")
    # the database stores each cell's sizes and counts as int64 (a cell past it was measured, then not
    # saved); torch takes no seed past it
    for name, value in (("--batch", config.batch_size), ("--heads", config.num_heads),
                        ("--warmup", config.warmup), ("--trials", config.trials), ("--seed", config.seed),
                        *(("--head-dims", v) for v in config.head_dims),
                        *(("--seq-lens", v) for v in config.seq_lens)):  # fmt: skip
        check_count(name, value)
    check_storage(config)


def check_storage(config: AttentionConfig) -> None:
    """UsageError where the largest cell's tensors would hold more bytes than a torch tensor can (int64):
    torch refuses to make one ("Storage size calculation overflowed"), so no cell of that size is measured.
    A size that fits int64 but not the device's memory is measured, and recorded as OOM."""
    b, h, s, d = config.batch_size, config.num_heads, max(config.seq_lens), max(config.head_dims)
    sizes = f"--batch {b} × --heads {h} × --seq-lens {s}"
    inputs = b * h * s * d * DRAWN_BYTES
    if inputs > INT64_MAX:
        raise UsageError(
            f"{sizes} × --head-dims {d} is too large: q, k and v would be {inputs:.3g} bytes each (float32 "
            f"as drawn), past the {INT64_MAX} a tensor can hold; give smaller sizes"
        )
    scores = b * h * s * s * COMPUTE_BYTES[config.precision]
    for impl in (i for i in config.impls if i in SCORES_IMPLS):
        if scores > INT64_MAX:
            raise UsageError(
                f"{sizes} is too large for --impl {impl}: its {s}×{s} scores would be {scores:.3g} bytes "
                f"({config.precision}), past the {INT64_MAX} a tensor can hold; give smaller sizes or "
                "--impl sdpa"
            )


def run_attention_sweep(
    config: AttentionConfig,
    *,
    sweep_id: str | None = None,
    on_cell: Callable[[AttentionSweep, AttentionCell], None] | None = None,
    progress: Callable[[AttentionCell], None] | None = None,
) -> AttentionSweep:
    """Every cell of impls × head dims × seq lens (in that nesting). `progress` is called before each cell
    (its status still "ok", nothing measured); `on_cell` after it, measured or failed."""
    validate(config)
    device = devices.resolve_device(config.device)
    sweep = AttentionSweep(
        sweep_id=sweep_id or new_sweep_id(),
        config=config,
        device=device.type,
        device_name=devices.device_name(device),
        memory_source=MEMORY_SOURCES.get(device.type, f"not measured on {device.type}"),
        env=env.collect(device),
    )
    for impl in config.impls:
        for head_dim in config.head_dims:
            for seq_len in config.seq_lens:
                cell = AttentionCell(impl, head_dim, seq_len)
                if progress:
                    progress(cell)
                _run_cell(config, device, cell)
                sweep.cells.append(cell)
                if on_cell:
                    on_cell(sweep, cell)
    return sweep


def _run_cell(config: AttentionConfig, device: Any, cell: AttentionCell) -> None:
    """Measure `cell` in place; out of memory (or any other failure) is recorded, not raised."""
    try:
        _measure(config, device, cell)
    except Exception as e:
        cell.status = "oom" if devices.is_oom(e) else "error"
        cell.error = first_line(e) or type(e).__name__
        cell.forward_mean_ns = cell.forward_std_ns = cell.backward_mean_ns = cell.backward_std_ns = None
        cell.peak_memory_bytes = None
    # after the except block, so the traceback (and the tensors its frames hold) is already gone
    devices.free_memory(device)


def _measure(config: AttentionConfig, device: Any, cell: AttentionCell) -> None:
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[config.precision]
    gen = torch.Generator().manual_seed(config.seed)
    shape = (config.batch_size, config.num_heads, cell.seq_len, cell.head_dim)
    # drawn on the CPU so a seed gives the same inputs on every device
    q, k, v, dout = (torch.randn(shape, generator=gen).to(device=device, dtype=dtype) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    devices.reset_peak_memory(device)
    fn = FACTORIES[cell.impl](config.causal)
    clock = PhaseClock(device)
    if cell.impl == "compiled":
        with clock.phase("compile", 0):
            fn(q, k, v).backward(dout)
        cell.compile_ns = clock.durations["compile"]
    forward, backward = [], []
    for i in range(config.warmup + config.trials):
        q.grad = k.grad = v.grad = None
        clock.reset()
        with clock.phase("forward", i):
            out = fn(q, k, v)
        with clock.phase("backward", i):
            out.backward(dout)
        del out
        if i >= config.warmup:
            forward.append(clock.durations["forward"])
            backward.append(clock.durations["backward"])
    fwd, bwd = figures("forward", forward), figures("backward", backward)
    cell.forward_mean_ns, cell.forward_std_ns = fwd.mean_ns, fwd.std_ns
    cell.backward_mean_ns, cell.backward_std_ns = bwd.mean_ns, bwd.std_ns
    q.grad = k.grad = v.grad = None
    if device.type == "cuda":
        cell.peak_memory_bytes = devices.peak_memory_bytes(device)
    elif device.type == "cpu":
        inputs = sum(t.untyped_storage().nbytes() for t in (q, k, v, dout))
        cell.peak_memory_bytes = inputs + _profiled_peak(fn, q, k, v, dout)


def _profiled_peak(fn: AttentionFn, q: Any, k: Any, v: Any, dout: Any) -> int:
    """Highest running sum of the CPU allocations (minus frees) torch's profiler records in one
    forward+backward. Nothing allocated before it is freed inside it (outputs and grads are gone)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn(q, k, v).backward(dout)
    # kineto_results keeps the allocation events in order; the public event list folds them into ops
    events = [
        e
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    ]
    running = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        running += e.nbytes()
        peak = max(peak, running)
    return peak


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2: libkineto writes start/stop lines to it on every profile, from C++."""
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def attention_table(sweep: AttentionSweep) -> pd.DataFrame:
    """One row per cell: impl, head_dim, seq_len, forward/backward mean and std (ns), peak memory (MiB),
    status as stored (ok, oom, error); `compile (ns)` when a compiled implementation ran."""
    import pandas as pd

    rows = []
    for c in sweep.cells:
        row: dict[str, object] = {
            "impl": c.impl,
            "head_dim": c.head_dim,
            "seq_len": c.seq_len,
            "forward mean (ns)": c.forward_mean_ns,
            "forward std (ns)": c.forward_std_ns,
            "backward mean (ns)": c.backward_mean_ns,
            "backward std (ns)": c.backward_std_ns,
            "peak memory (MiB)": None if c.peak_memory_bytes is None else c.peak_memory_bytes / 2**20,
            "status": c.status,  # as stored, as runs and sweep write a run's
        }
        if "compiled" in sweep.config.impls:
            row["compile (ns)"] = c.compile_ns
        rows.append(row)
    df = pd.DataFrame(rows)
    for col in df.columns:  # None → NaN, so OOM cells print as "—" and stay numeric columns in csv/json
        if col not in ("impl", "status"):
            df[col] = pd.to_numeric(df[col])
    return df
