"""The words a run is described in, shared by the harness that records it and the analysis that reads it
back: run modes and their phases, precisions, attentions, the NVTX ranges around steps, run statuses, the
sources of block times, and how a count is said (`counted`: `1 measured step`). harness/ and analysis/
import them from here, nowhere else; this module imports nothing, so importing it loads no torch
(workloads/__init__.py hands its other names on lazily)."""

from __future__ import annotations

FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
PREFILL, DECODE = "prefill", "decode"
# generate's decode path of `--cuda-graphs` as a run stores it (its serving figures' `decode`)
CUDA_GRAPH_DECODE = "CUDA graph (captured once, replayed per token)"
# ... and of `--new-tokens 1`, where the one token is prefill's and no path decodes anything
NO_DECODE = "none (one new token: prefill's)"
TRAIN_PHASES = (FORWARD, BACKWARD, OPTIMIZER)
GENERATE_PHASES = (PREFILL, DECODE)
PHASES_BY_MODE = {"train": TRAIN_PHASES, "forward": (FORWARD,), "generate": GENERATE_PHASES}
# `run --nproc N` (train): backward runs under DDP's no_sync() and the gradients are then all-reduced
# explicitly, timed as a phase of its own (harness/execution/ranks/distributed.py)
ALLREDUCE = "allreduce"
COMM_PHASES = (ALLREDUCE,)
DISTRIBUTED_TRAIN_PHASES = (FORWARD, BACKWARD, ALLREDUCE, OPTIMIZER)
MODES = tuple(PHASES_BY_MODE)
PROGRAM_MODE = "program"  # `harness profile -- CMD`: a program the harness does not time, so no phases
# every phase the harness times, in the order a step runs them
ALL_PHASES = (FORWARD, BACKWARD, ALLREDUCE, OPTIMIZER, PREFILL, DECODE)
PRECISIONS = ("fp32", "bf16", "fp16")
# a workload's setting (precision, device, attention) as a run of a program (`harness profile -- CMD`) is
# stored with it: the program has none of its own
NOT_APPLICABLE = "n/a"


def phases_for(mode: str, world_size: int = 1, new_tokens: int | None = None) -> tuple[str, ...]:
    """The timed phases of a mode; a run across ranks (world_size > 1) adds the gradient all-reduce, and
    generate with one new token (`new_tokens`), which is prefill's, has no decode."""
    if mode == PROGRAM_MODE:
        return ()
    if mode == "generate" and new_tokens == 1:
        return (PREFILL,)
    return DISTRIBUTED_TRAIN_PHASES if world_size > 1 and mode == "train" else PHASES_BY_MODE[mode]


ATTENTIONS = ("math", "sdpa")  # the model's attention: QKᵀ, softmax, ·V as separate ops, or fused
ATTENTION_IMPLS = (*ATTENTIONS, "compiled")  # `harness attention`'s implementations, in its order

# run statuses whose timers measured every step: `degraded` is such a run whose capture failed its health
# checks (its timings stand; numbers drawn from its capture do not)
MEASURED_STATUSES = ("ok", "degraded")

# generate's latency percentiles (TTFT over the measured steps, TPOT over the decoded tokens) and the fewest
# samples each is given of: the p-th needs 100 / (100 - p) of them (p90 10, p99 100) for one to lie above it;
# of fewer it would be the largest sample interpolated, not a tail measured, and is left blank
PERCENTILE_SAMPLES = {50: 1, 90: 10, 99: 100}


def percentile(stats: dict, q: int) -> float | None:
    """The `q`-th percentile of latency statistics (`{"count": n, "p50_ns": …}`, as generate stores them),
    None where it has none or its count is under PERCENTILE_SAMPLES[q] (a run stored with one drawn of
    fewer samples: it is not shown)."""
    value = stats.get(f"p{q}_ns")
    return value if value is not None and stats.get("count", 0) >= PERCENTILE_SAMPLES[q] else None


STEP = "step"  # one NVTX range around each step, payload = step index
MEASURED = "measured"  # one NVTX range around all measured (non-warm-up) steps
WARMUP = "warmup"
TOKEN = "token"  # generate: one NVTX range per decoded token inside `decode`, payload = the token's index
# the fetch of a step's batch from a loader, inside the step (a planted batch source: at the start of forward
# in the harness's train step, before forward in `python -m workloads.plants`): a capture tells the loader's
# time from the model's by it
DATA = "data"

# The run-level energy figures of `run --power` (analysis.runs.energy.run_summary): the results store keeps a
# column of each name
RUN_ENERGY_FIELDS = (
    "energy_j",
    "avg_power_w",
    "peak_power_w",
    "flops_per_j",
    "tokens_per_j",
    "energy_method",
)
# how analysis.runs.energy measured a run's joules (its energy_method): from a device's energy counter, from
# its power readings, or for devices summed, the methods of its devices joined
ENERGY_COUNTER, ENERGY_POWER = "counter", "power"
ENERGY_METHODS = (ENERGY_COUNTER, ENERGY_POWER, f"{ENERGY_COUNTER}+{ENERGY_POWER}")

LAYER = "layer"  # the block of a whole transformer layer (its NVTX range is layer_N)
# Where a run's per-block times (--nvtx-detail) come from: the table of `harness blocks` names it
BLOCK_TIMERS = (
    "timers"  # synchronised forward/backward hooks in the run's process (harness.execution.block_timers)
)
BLOCK_TORCH = "torch-trace"  # record_function ranges of a torch.profiler trace (CPU time)
BLOCK_NVTX = "nvtx"  # NVTX ranges of an nsys export (CPU time: a run without a GPU)
BLOCK_NVTX_GPU = "nvtx-gpu"  # GPU time of the kernels launched inside each range (nsys or torch, on a GPU)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """A count and its noun as people read them: `1 measured step`, `2 measured steps`, `1,024 kernels`
    (`plural` where adding an s is wrong: `counted(n, "entry", "entries")`)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
