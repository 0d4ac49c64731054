"""What every rule of `harness advise` shares: a finding (its evidence in words and as data), the thresholds,
what the stored run says beside its capture (`RunRecord`), and the capture as the rules read it (`Seen`:
each frame read once, the harness's own instruments found once, the measured steps)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from analysis.advice import where
from analysis.advice.instruments import Instruments, instruments
from analysis.errors import DECIMAL, OptionsError
from analysis.trace.trace import Trace
from workloads.names import DATA, MEASURED

COLUMNS = ["Rule", "Time at stake (ns)", "Where", "Evidence", "Fix"]
WRAPPED = ["Where", "Evidence", "Fix"]  # a finding's sentences
DATA_COLUMN = "Data"  # the evidence as data: csv and json only
# what shows a data loader at work: torch.profiler's range around each next(iter(loader)), a `data` range
# (the harness's planted loaders and programs: workloads.names.DATA), DataLoader's worker and pinning threads
LOADER_RANGES = rf"enumerate\(DataLoader\).*|{DATA}"
LOADER_THREADS = ("pt_data_worker", "pt_data_pin")
# the fix of attention written out (its scores materialised), seen in kernels or in operators
FIX_ATTENTION = (
    "use torch.nn.functional.scaled_dot_product_attention (a fused kernel) instead of QKᵀ, softmax and ·V"
)


def share(default: float, *, below: bool = False) -> Any:
    """A threshold that is a share of something, 0 to 1: its rule fires at or above it (inf, given as
    such, turns it off), or `below` it (where inf would fire it whatever it sees)."""
    return field(default=default, metadata={"share": "below" if below else "at least"})


@dataclass(frozen=True)
class Thresholds:
    """When each rule fires (docs/advice.md says why these defaults)."""

    host_wait_share: float = share(0.10)  # host-wait idle of the busiest stream, share of the GPU's span
    syncs_per_step: float = 1.0  # blocking synchronisations per step, on average
    # launch-bound: GPU busy below this share of the phase ...
    launch_busy_below: float = share(0.50, below=True)
    launch_share_above: float = share(0.30)  # ... while launch calls take at least this share of it
    optimizer_kernels: int = 50  # optimizer: kernels per optimizer step from this many ...
    optimizer_median_ns: int = 20_000  # ... with a median kernel shorter than this
    # optimizer: below this share of its memory roof (the run's roofline)
    optimizer_roof_below: float = share(0.50, below=True)
    # nsys's own time inside a phase, share of the phase (health's threshold)
    overhead_share: float = share(0.02)
    # GPU idle while loading data / between steps, share of the steps' time
    data_loading_share: float = share(0.05)
    # communication kernels with no computation beside, share of GPU span
    exposed_comm_share: float = share(0.10)
    fp32_gemm_share: float = share(0.05)  # fp32 GEMMs' GPU time, share of the kernels' GPU time in the steps
    copies_per_step: float = 1.0  # pageable or device-to-host copies per step, on average

    def with_options(self, options: list[str]) -> Thresholds:
        """These thresholds with `NAME=VALUE` options applied; OptionsError (a usage error) naming what is
        wrong."""
        types = {f.name: type(getattr(self, f.name)) for f in fields(self)}
        shares = {f.name: f.metadata["share"] for f in fields(self) if "share" in f.metadata}
        changed = {}
        for opt in options:
            key, eq, value = opt.partition("=")
            if key not in types or not eq:
                raise OptionsError(f"threshold {opt!r}: use NAME=VALUE, NAME one of {', '.join(types)}")
            try:
                changed[key] = number = _number(types[key], value)
            except ValueError:
                words = "whole number" if types[key] is int else "number"
                raise OptionsError(f"threshold {key} takes a {words}, not {value!r}") from None
            if math.isnan(number) or number < 0:  # nan compares false: a rule would always fire
                raise OptionsError(f"threshold {key} takes a number, 0 or more, not {value!r}")
            if key in shares and number > 1 and (number < math.inf or shares[key] == "below"):
                # a percent given as one (10 for 10%) silences the rule, or fires it whatever it sees
                default = getattr(Thresholds(), key)
                reads = f": that reads as {number:.0%}" if number < math.inf else ""
                raise OptionsError(
                    f"threshold {key} is a share, 0 to 1 ({default} is {default:.0%}), not {value!r}{reads}"
                )
        return replace(self, **changed)

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in asdict(self).items())


def _number(kind: type, value: str) -> int | float:
    """`value` as a threshold of `kind`; a whole-number one written as a float (2e4, 50.0) is taken as the
    whole number it is (ValueError for any other text, or a fraction of a whole-number one). ASCII digits
    only (DECIMAL), as every number option."""
    if not DECIMAL.fullmatch(value.strip()):
        raise ValueError(value)
    if kind is not int:
        return kind(value)
    try:
        return int(value)
    except ValueError:
        number = float(value)
    if not number.is_integer():
        raise ValueError(value)
    return int(number)


@dataclass
class Finding:
    rule: str
    at_stake_ns: int
    where: str
    evidence: str
    fix: str
    table: pd.DataFrame | None = field(default=None, repr=False)
    data: dict[str, Any] = field(default_factory=dict)  # the numbers, calls and ranges it rests on (json)


@dataclass(frozen=True)
class OptimizerRoof:
    """The optimizer phase against its memory roof, from the run's own roofline (analysis.runs.roofline's
    phase table: the AdamW update's bytes at the device's bandwidth)."""

    of_roof_pct: float  # achieved bandwidth, percent of the roof's
    time_ns: float  # the phase's mean time over the measured steps
    roofline_ns: float  # the least time the roof allows
    bytes: float
    achieved_gbs: float
    roof: str  # which roofs: "NVIDIA H200 (datasheet)"


@dataclass(frozen=True)
class RunRecord:
    """What a stored run says beside its capture, for the rules that need it (`harness advise RUN`)."""

    steps: int = 0  # warm-up and measured steps the run made
    measured_steps: int = 0
    dynamo: dict[str, int] | None = (
        None  # torch.compile's counters over the run (frames, graphs, graph_breaks)
    )
    forward_ns: float | None = None  # the forward phase's time summed over the measured steps
    optimizer_roof: OptimizerRoof | None = None

    @property
    def warmup(self) -> int | None:
        """The run's warm-up steps (None: its timers are not known)."""
        return self.steps - self.measured_steps if self.steps else None

    @classmethod
    def of(
        cls, timers: pd.DataFrame | None, dynamo: object = None, optimizer_roof: OptimizerRoof | None = None
    ) -> RunRecord:
        """The record of a run from its timers (step, phase, duration_ns, warmup, rank: its first rank's
        steps counted) and torch.compile's counters as it kept them: the same whether the run was just
        captured (`run --nsys`) or is read back from the results database (`advise RUN`)."""
        if timers is None or not len(timers):
            return cls(dynamo=_counters(dynamo), optimizer_roof=optimizer_roof)
        first, measured = _first_rank(timers)
        forward = measured.loc[measured["phase"] == "forward", "duration_ns"]
        return cls(
            steps=int(first["step"].nunique()),
            measured_steps=int(measured["step"].nunique()),
            dynamo=_counters(dynamo),
            forward_ns=float(forward.sum()) if len(forward) else None,
            optimizer_roof=optimizer_roof,
        )


def _counters(dynamo: object) -> dict[str, int] | None:
    return {str(k): int(v) for k, v in dynamo.items()} if isinstance(dynamo, dict) else None


def _first_rank(timers: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The steps of a run's first rank (a NULL rank is 0, as in databases from before ranks), and the
    measured ones among them."""
    if not len(timers):
        return timers, timers
    ranks = timers["rank"].fillna(0)
    first = timers[ranks == ranks.min()]
    return first, first[~first["warmup"].astype(bool)]


@dataclass(frozen=True)
class Stop:
    """A run stopped before its end (Ctrl-C, SIGTERM): the steps its capture lacks after the stop were never
    run, not lost by the profiler."""

    how: str  # "interrupted by SIGINT"
    measured: int  # the measured steps it finished
    planned: int  # the measured steps it was to run
    first: int = 0  # the first measured step's index (its warm-up steps before it)

    @classmethod
    def of(cls, how: str, timers: pd.DataFrame, planned: int, first: int = 0) -> Stop:
        """The stop of a run whose timers are `timers` (rank, step, warmup, …): the measured steps its first
        rank finished (a NULL rank is 0, as in databases from before ranks)."""
        _, measured = _first_rank(timers)
        return cls(how, int(measured["step"].nunique()), planned, first)

    def said(self, at: int | None = None) -> str:
        """`the run was interrupted by SIGINT in step 7, after 2 of its 25 measured steps (5–29)`."""
        span = f"{self.first}–{self.first + self.planned - 1}" if self.planned > 1 else str(self.first)
        where = f" in step {at}" if at is not None else ""
        return (
            f"the run was {self.how}{where}, after {self.measured} of its {self.planned} measured steps "
            f"({span})"
        )


class Seen:
    """The capture as the rules read it: each frame once, the harness's instruments, the measured steps.
    Where a process marked its measured steps (the harness's `measured` range), its ranges outside it
    (warm-up: compilation, the allocator's first steps) are left out."""

    def __init__(self, trace: Trace, thresholds: Thresholds, run: RunRecord | None = None) -> None:
        self.trace = trace
        self.th = thresholds
        self.run = run

    @cached_property
    def measured(self) -> pd.DataFrame:
        """The harness's `measured` ranges (start, end, pid, tid, name): none in other captures."""
        return where.named_ranges(self.trace, MEASURED)

    @cached_property
    def all_ranges(self) -> pd.DataFrame:
        """Every range of the capture (where.ranges), warm-up's too."""
        return where.ranges(self.trace)

    @cached_property
    def ranges(self) -> pd.DataFrame:
        rs, measured = self.all_ranges, self.measured
        if measured.empty:
            return rs
        keep = where.in_measured(rs["pid"].to_numpy(), rs["start"].to_numpy(), rs["end"].to_numpy(), measured)
        return rs[keep].reset_index(drop=True)

    @cached_property
    def steps(self) -> pd.DataFrame:
        return where.steps_of(self.ranges)

    @cached_property
    def warmup_captured(self) -> bool:
        """Whether the capture holds steps before the measured ones (a harness run's warm-up): False where
        it began with them (`run --nsys-capture measured`); True where no `measured` range says so."""
        if self.measured.empty:
            return True
        steps = where.steps_of(self.all_ranges)
        first = self.measured.groupby("pid")["start"].min()
        return bool((steps["start"] < steps["pid"].map(first).fillna(-1)).any())

    @cached_property
    def step_time(self) -> int:
        return int((self.steps["end"] - self.steps["start"]).sum())

    @cached_property
    def calls(self) -> pd.DataFrame:
        return where.calls(self.trace)

    @cached_property
    def os_calls(self) -> pd.DataFrame:
        return where.os_calls(self.trace)

    @cached_property
    def instruments(self) -> Instruments:
        return instruments(self.trace, timed=bool(self.run and self.run.steps))

    @cached_property
    def gpu_work(self) -> pd.DataFrame | None:
        """The GPU's kernels, copies and sets (gpu_events less sync events); None without any."""
        return where.gpu_work(self.trace) if self.has_gpu else None

    def idle(self, starts: np.ndarray, ends: np.ndarray, pids: np.ndarray) -> np.ndarray:
        """Per interval of process pids[i]: the time its GPU work left the GPU idle in it
        (where.busy_within)."""
        starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        if self.gpu_work is None:
            return ends - starts
        return ends - starts - where.busy_within(self.gpu_work, starts, ends, np.asarray(pids))

    @cached_property
    def has_gpu(self) -> bool:
        return where.has_gpu(self.trace)

    @cached_property
    def threads(self) -> dict[int, str]:
        if not self.trace.has("threads"):
            return {}
        t = self.trace.frame("threads", ["global_tid", "name"])
        return {int(k): str(v) for k, v in zip(t["global_tid"], t["name"], strict=True)}

    @cached_property
    def ops(self) -> pd.DataFrame:
        """Framework operators (Kineto's cpu_op events): start, end, global_tid, name, pid."""
        return where.named_events(self.trace, "cpu_ops")

    def in_steps(self, times: np.ndarray, pids: np.ndarray | None = None) -> np.ndarray:
        return where.inside(self.steps, times, pids)

    def phase_ranges(self, phase: str) -> pd.DataFrame:
        return self.ranges[self.ranges["phase"] == phase]

    def place(self, times: np.ndarray, weights: np.ndarray, pids: np.ndarray | None = None) -> str:
        return where.place(self.ranges, times, weights, pids)

    def per_step(self, n: int) -> float:
        return n / len(self.steps) if len(self.steps) else 0.0
