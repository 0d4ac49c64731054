"""The data a run produces, independent of how it is stored or shown. Times are integer nanoseconds."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from analysis.names import GENERATE_PHASES, PHASES_BY_MODE, TRAIN_PHASES
from analysis.names import STEP as STEP_RANGE

FORWARD_PHASES = PHASES_BY_MODE["forward"]
__all__ = ["FORWARD_PHASES", "GENERATE_PHASES", "PROGRAM_MODE", "STEP_RANGE", "TRAIN_PHASES", "phases_for"]


PROGRAM_MODE = "program"  # `harness profile -- CMD`: a program the harness does not time, so no phases


def phases_for(mode: str) -> tuple[str, ...]:
    return () if mode == PROGRAM_MODE else PHASES_BY_MODE[mode]


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
    nvtx_detail: bool = False
    power: bool = False  # sample power over the measured steps (harness/power.py)
    power_period_ms: int = 50
    memory: bool = False  # record the measured steps' memory (harness/memory.py)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StepRecord:
    step: int
    warmup: bool
    phases: dict[str, int]  # phase -> duration_ns
    starts: dict[str, int] = field(default_factory=dict)  # phase -> perf_counter_ns at its start


@dataclass
class PhaseStats:
    phase: str
    count: int
    mean_ns: float
    std_ns: float
    median_ns: float
    min_ns: int
    max_ns: int

    @classmethod
    def of(cls, phase: str, durations: list[int]) -> PhaseStats:
        return cls(
            phase=phase,
            count=len(durations),
            mean_ns=statistics.fmean(durations),
            std_ns=statistics.stdev(durations) if len(durations) > 1 else 0.0,
            median_ns=float(statistics.median(durations)),
            min_ns=min(durations),
            max_ns=max(durations),
        )


@dataclass
class ModelInfo:
    family: str
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    vocab_size: int
    context_length: int
    params: int


@dataclass
class RunResult:
    run_id: str
    config: RunConfig
    status: str  # "ok" | "oom" | "error" | "interrupted"
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
    env: dict[str, Any] = field(default_factory=dict)

    def measured(self, phase: str) -> list[int]:
        return [s.phases[phase] for s in self.steps if not s.warmup and phase in s.phases]

    def phase_stats(self) -> list[PhaseStats]:
        out = []
        for phase in phases_for(self.config.mode):
            durations = self.measured(phase)
            if durations:
                out.append(PhaseStats.of(phase, durations))
        return out


def result_to_dict(result: RunResult) -> dict[str, Any]:
    return asdict(result)


def result_from_dict(data: dict[str, Any]) -> RunResult:
    data = dict(data)
    data["config"] = RunConfig(**data["config"])
    data["model"] = ModelInfo(**data["model"]) if data.get("model") else None
    data["steps"] = [StepRecord(**s) for s in data.get("steps", [])]
    return RunResult(**data)
