"""The data a run produces, independent of how it is stored or shown. Times are integer nanoseconds."""

from __future__ import annotations

import secrets
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.bounds import INT64_MAX, digits
from harness.core.signals import ended_by
from workloads.names import GENERATE_PHASES, PHASES_BY_MODE, PROGRAM_MODE, TRAIN_PHASES, phases_for
from workloads.names import STEP as STEP_RANGE
from workloads.plants import catalogue
from workloads.plants.catalogue import KNOBS, Knobs

if TYPE_CHECKING:  # workloads/__init__ loads torch
    import pandas as pd

    from workloads.specs import ModelSpec

FORWARD_PHASES = PHASES_BY_MODE["forward"]
__all__ = ["FORWARD_PHASES", "GENERATE_PHASES", "PROGRAM_MODE", "STEP_RANGE", "TRAIN_PHASES", "phases_for"]


LATEST = "latest"  # the newest run, wherever a run id is taken
# a profiler's files (nsys export, report, Kineto trace) where a command takes a run id or a file
FILE_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep", ".json", ".gz")
# RunConfig fields that do not change what a step times: counts, the seed, the rank layout, --power's period
UNTIMED_FIELDS = frozenset(
    {"seed", "steps", "warmup", "rank_timeout", "rdzv_endpoint", "node_rank", "power_period_ms"}
)
# the result.extra (and stored summary) key of the capture range nsys was given: None, none
CAPTURE_RANGE = "capture_range"
# the summary key of a program's run that nsys ended when its --duration ran out: that --duration, as given
ENDED_BY_NSYS = "ended_by_nsys"


def program_signal(summary: dict[str, Any]) -> int | None:
    """The signal that ended a profiled program (`profile -- CMD`), from its stored exit code; None where it
    exited, or where nsys ended it after its capture had stopped (--duration): nothing is then missing."""
    return None if summary.get(ENDED_BY_NSYS) else ended_by(summary.get("exit_code"))


GENERATE_ONLY = frozenset({"new_tokens", "cuda_graphs"})  # RunConfig fields only a generate run reads
# `--nsys-mode`, as a run under nsys is stored (harness.execution.nsys.launch gives each its flags)
NSYS_MODES = ("light", "full")


def newest_back(ref: str) -> int | None:
    """How far back from the newest run `ref` counts (`latest` and -1: 0, -2: 1, ...); None: an id."""
    if ref == LATEST:
        return 0
    back = digits(ref[1:]) if ref.startswith("-") else None
    if back is not None and back >= 1:
        # the database takes an offset of 64 bits: one past it counts back past every run there, as any
        # count past their number does (-99999999999999999999 failed in the driver with a traceback)
        return min(back - 1, INT64_MAX)
    return None


def new_id(prefix: str) -> str:
    """The id of a run (its model first), a sweep or an experiment: PREFIX-YYYYmmdd-HHMMSS-hhhhhhhh, in the
    order they started; the 8 random hex digits keep those started in the same second apart (a run saved
    under the id of another replaces it: with 4, the 15 runs `optimize` starts within a second or two met
    one in a few hundred times). This process never gives one twice: 8 digits still meet about once in
    8,600 thousands drawn in one second."""
    while True:
        made = f"{prefix}-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
        if made not in _GIVEN:
            _GIVEN.add(made)
            return made


_GIVEN: set[str] = set()  # the ids this process gave (a few a run: small however long it lives)


def names_a_file(ref: str) -> bool:
    """Whether `ref`, where a command takes a run id or a file, names a file: one is there, or it has a
    folder or a profiler file's suffix (a mistyped file name is then said missing as a file, not as a run).
    An empty `ref` names nothing (not the current folder, which Path("") is): the run lookup says so."""
    if not ref:
        return False
    if "/" in ref or ref.endswith(FILE_SUFFIXES):
        return True
    try:
        return Path(ref).exists()
    except (OSError, ValueError):  # a name no file can have (a NUL in it, too long)
        return False


@dataclass
class RunConfig:
    model: str
    mode: str = "train"
    device: str = "auto"
    precision: str = "fp32"
    compile: bool = False
    batch_size: int = 4
    context_length: int | None = None  # None: the model's default
    vocab_size: int | None = None  # None: the model's default
    warmup: int = 5
    steps: int = 10
    seed: int = 0
    attention: str = "sdpa"
    new_tokens: int = 32
    # generate on CUDA: decode with a static KV cache, one step captured as a CUDA graph, replayed per token
    cuda_graphs: bool = False
    nvtx_detail: bool = False
    power: bool = False  # sample power over the measured steps (harness/energy/power.py)
    power_period_ms: int = 50
    memory: bool = False  # record the measured steps' memory (harness/execution/memory.py)
    # across ranks (`--nproc`, harness/execution/ranks/multirank.py): torchrun's layout; 1 × 1 is a plain
    # one-process run
    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    rank_timeout: float = 300.0  # seconds a rank may go without starting a phase before the run is stopped
    # `--delay-rank R:MS`: rank R sleeps MS ms in every forward (a known straggler, for tests and demos)
    delay_rank: int | None = None
    delay_ms: int = 0
    # `--plant CAUSE` (train): one known cause planted in the step (workloads/plants/: its catalogue and code)
    plant: str | None = None
    # the train step's knobs (workloads.plants.catalogue.Knobs, each a run option of its name): AdamW's
    # implementation, and the fixes of a planted step (the loader's workers, pinned copies, the loss read
    # every N steps, the compiled loss's dynamic shapes)
    optimizer: str = "auto"
    loader_workers: int = 0
    pin_memory: bool = False
    loss_every: int = 1
    dynamic_shapes: bool = False
    # the catalogue's fixes applied to this configuration (`harness optimize`): a field a fix changes keeps
    # its value over the plant's setting of it
    fixes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # a cause that needs a setting (launch-bound: batch 1) has it in every configuration that plants it,
        # unless a fix changed it, so what is stored is what ran
        for name, value in catalogue.settings(self.plant, self.fixes).items():
            setattr(self, name, value)
        # torch.compile compiles in the first step: it is always a warmup step, never a measured one, and
        # every reader of the configuration (the runner, the profilers' schedules, progress) sees it so
        if self.compile and self.warmup == 0:
            self.warmup = 1

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def knobs(self) -> Knobs:
        return Knobs(**{name: getattr(self, name) for name in KNOBS})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# RunConfig's defaults, each field that has one (a field stored runs predate is read as its default)
CONFIG_DEFAULTS: dict[str, Any] = {
    f.name: f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
    for f in fields(RunConfig)
    if f.default is not MISSING or f.default_factory is not MISSING
}


@dataclass
class StepRecord:
    step: int
    warmup: bool
    phases: dict[str, int]  # phase -> duration_ns
    starts: dict[str, int] = field(default_factory=dict)  # phase -> perf_counter_ns at its start
    rank: int = 0  # the global rank that ran it (runs across ranks)
    # generate: each decoded token's time (ns), tokens 1 … new_tokens - 1 (timing.TokenClock)
    tokens: list[int] = field(default_factory=list)


@dataclass
class BlockRecord:
    """One block's time in one measured step (summed over its `calls` in that step); layer None: a block
    outside the layers (embedding, final norm, LM head)."""

    step: int
    layer: int | None
    block: str
    phase: str
    duration_ns: int
    calls: int = 1


@dataclass
class ModelInfo:
    """The model a run built, as stored: its ModelSpec's shape (`from_spec`) and its parameter count."""

    family: str
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    vocab_size: int
    context_length: int
    params: int

    @classmethod
    def from_spec(cls, spec: ModelSpec, params: int, context_length: int | None = None) -> ModelInfo:
        """`spec`'s shape (with the context actually used, where it differs) and `params`."""
        shape = {f.name: getattr(spec, f.name) for f in fields(cls) if f.name != "params"}
        if context_length is not None:
            shape["context_length"] = context_length
        return cls(**shape, params=params)


@dataclass
class RunResult:
    run_id: str
    config: RunConfig
    status: str  # "ok" | "degraded" (its capture failed its health checks) | "oom" | "error" | "interrupted"
    device: str = "cpu"  # resolved device type
    device_name: str = ""
    model: ModelInfo | None = None
    steps: list[StepRecord] = field(default_factory=list)
    error: str | None = None
    tokens_per_s: float | None = None
    flops_per_step: float | None = None
    achieved_flops: float | None = None  # FLOP/s
    mfu: float | None = None
    peak_memory_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # mode-specific figures (ttft_ns, per-token latency)
    blocks: list[BlockRecord] = field(default_factory=list)  # --nvtx-detail's per-block timers (no profiler)
    env: dict[str, Any] = field(default_factory=dict)

    def measured(self, phase: str) -> list[int]:
        return [s.phases[phase] for s in self.steps if not s.warmup and phase in s.phases]


PHASE_FIGURES = "phases"  # a run's summary: each phase's statistics (analysis.runs.steady.PhaseStats)


def measured_steps(result: RunResult) -> list[dict[str, int]]:
    """Each measured (not warm-up) step's phases: phase -> duration_ns."""
    return [s.phases for s in result.steps if not s.warmup]


def timer_frame(result: RunResult) -> pd.DataFrame:
    """Every step's phase durations as the results store gives a stored run's (`step_timings`): run_id,
    step, phase, duration_ns, warmup, rank."""
    import pandas as pd

    return pd.DataFrame(
        [
            (result.run_id, s.step, p, ns, s.warmup, s.rank)
            for s in result.steps
            for p, ns in s.phases.items()
        ],
        columns=["run_id", "step", "phase", "duration_ns", "warmup", "rank"],
    )


def phases_of(result: RunResult) -> tuple[str, ...]:
    """The timed phases of the run's mode (with the all-reduce across ranks)."""
    return config_phases(result.config)


def config_phases(config: RunConfig) -> tuple[str, ...]:
    """The phases a step of this configuration times (workloads.names.phases_for)."""
    return phases_for(config.mode, config.world_size, config.new_tokens)


def stored_phases(run: Any) -> tuple[str, ...]:
    """The phases a step of a stored run (harness.store.schema.Run) times, from its configuration."""
    return phases_for(run.mode, run.world_size or 1, (run.config or {}).get("new_tokens"))


def result_to_dict(result: RunResult) -> dict[str, Any]:
    return asdict(result)


def result_from_dict(data: dict[str, Any]) -> RunResult:
    data = dict(data)
    data["config"] = RunConfig(**data["config"])
    data["model"] = ModelInfo(**data["model"]) if data.get("model") else None
    data["steps"] = [StepRecord(**s) for s in data.get("steps", [])]
    data["blocks"] = [BlockRecord(**b) for b in data.get("blocks", [])]
    return RunResult(**data)


# `harness attention`: one sweep of attention implementations over head dims × sequence lengths
@dataclass(frozen=True)
class AttentionConfig:
    batch_size: int = 8
    num_heads: int = 1
    head_dims: tuple[int, ...] = (16, 32, 64, 128)
    seq_lens: tuple[int, ...] = (128, 256, 512)
    precision: str = "fp32"
    impls: tuple[str, ...] = ("math", "sdpa")
    warmup: int = 3
    trials: int = 10
    causal: bool = True
    device: str = "auto"
    seed: int = 0


@dataclass
class AttentionCell:
    """One implementation at one head dim × seq len. Times are ns; None where the cell did not finish."""

    impl: str
    head_dim: int
    seq_len: int
    status: str = "ok"  # ok | oom | error
    forward_mean_ns: float | None = None
    forward_std_ns: float | None = None
    backward_mean_ns: float | None = None
    backward_std_ns: float | None = None
    peak_memory_bytes: int | None = None
    compile_ns: int | None = None  # compiled: the first call, compilation included
    error: str | None = None


@dataclass
class AttentionSweep:
    sweep_id: str
    config: AttentionConfig
    device: str  # resolved device type
    device_name: str
    memory_source: str
    env: dict[str, Any] = field(default_factory=dict)
    cells: list[AttentionCell] = field(default_factory=list)
