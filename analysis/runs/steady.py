"""The steady-state figures of a run, computed in one place: every command that prints them asks here.

A run's steady state is its measured steps (warm-up steps left out). Per phase, and for the whole step (the
sum of a step's phases, then the statistics of those sums), `steady` gives the count, mean, sample
standard deviation (None for a single step: undefined there, not 0), median, extremes and a 95% confidence
interval of the median; the first step is kept apart (with torch.compile it holds the compilation).
`harness show`'s phase table (through PhaseStats), the compile table of `run` and `show`, `harness
compare-compile` and the dashboard's compile panel all take their medians from here, so one figure is one
number everywhere.

The median of the step sums is not the sum of the phases' medians: tables that list the phases and the
step show the difference as a row of its own (`REMAINDER`), so the rows always add up.

The interval of a median is distribution-free: the order statistics x(k) and x(n+1-k) with the largest k
for which a Binomial(n, 1/2) falls below k with probability at most 2.5% (so at least 95% coverage). Below
six steps no such k exists and the interval is the whole range (min, max), which covers 1 - 2^(1-n).
The interval of a ratio of medians (a speed-up) is a percentile bootstrap with a fixed seed, so a table
prints the same bounds every time. With one run a side both hold the step-to-step noise only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

STEP = "step"  # the whole step: the sum of a step's phases
REMAINDER = "step − phases"  # median of the step sums minus the sum of the phases' medians
CONFIDENCE = 0.95
BOOTSTRAP = 2000  # resamples for a ratio's interval


@dataclass(frozen=True)
class Steady:
    """The figures of one phase (or the whole step) over the measured steps, in ns."""

    count: int
    mean_ns: float
    std_ns: float | None  # None for one value: a sample standard deviation needs two
    median_ns: float
    min_ns: float
    max_ns: float
    ci_low_ns: float  # the median's 95% interval
    ci_high_ns: float


def median_rank(n: int, confidence: float = CONFIDENCE) -> int:
    """k (1-based) of the order statistics x(k), x(n+1-k) that bound the median with `confidence`; 0 when
    n is too small for any pair to reach it (the interval is then the whole range).

    The least j with P(B <= j) > tail, B ~ Binomial(n, 1/2), walked up from 12 standard deviations (6·√n)
    below the mean: what lies below holds less than exp(-72) of the mass (Hoeffding), so O(√n) steps, each
    term the last times (n - j) / (j + 1), the first from lgamma. Summing math.comb(n, j) / 2**n from j = 0
    made integers of n bits at every step: 28 s at n = 20,000, for a run's every phase."""
    tail = (1 - confidence) / 2
    j = max(0, math.floor(n / 2 - 6 * math.sqrt(n)))
    pmf = math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) - n * math.log(2))
    cdf = 0.0  # P(B <= j), less what lies below the start
    while True:
        cdf += pmf
        if cdf > tail:
            return j  # P(B <= j - 1) <= tail < P(B <= j)
        pmf *= (n - j) / (j + 1)
        j += 1


def steady(durations: Sequence[float]) -> Steady:
    """The figures of one set of measured durations (not empty)."""
    values = sorted(float(d) for d in durations)
    n = len(values)
    k = median_rank(n)
    low, high = (values[k - 1], values[n - k]) if k else (values[0], values[-1])
    return Steady(
        count=n,
        mean_ns=statistics.fmean(values),
        std_ns=statistics.stdev(values) if n > 1 else None,
        median_ns=float(statistics.median(values)),
        min_ns=values[0],
        max_ns=values[-1],
        ci_low_ns=low,
        ci_high_ns=high,
    )


@dataclass(frozen=True)
class RunSteady:
    """A run's steady state per phase and for STEP, its first step, and each phase's measured durations."""

    figures: dict[str, Steady]
    first: dict[str, float]  # the first step (when it was a warm-up step): per phase and STEP
    samples: dict[str, list[float]]

    def median(self, phase: str) -> float | None:
        return self.figures[phase].median_ns if phase in self.figures else None

    def compile_ns(self, phase: str) -> float | None:
        """The first step beyond the steady median (torch.compile's compilation), signed: a phase whose first
        step was faster than its median is negative (its compilation counted in another phase), so the
        phases' figures and the remainder's add up to the step's, which clipping at zero would break."""
        if phase not in self.first or phase not in self.figures:
            return None
        return self.first[phase] - self.figures[phase].median_ns

    def remainder(self, phases: Iterable[str]) -> float | None:
        """Median step − Σ phase medians: what makes the phase rows add up to the step row."""
        present = [p for p in phases if p in self.figures]
        if STEP not in self.figures or not present:
            return None
        return self.figures[STEP].median_ns - sum(self.figures[p].median_ns for p in present)


def run_steady(steps: Iterable[tuple[Any, ...]], phases: Sequence[str]) -> RunSteady:
    """From a run's step records (step, phase, duration ns, warmup[, rank]): its figures per phase in
    `phases` (those it has) and for STEP. Each rank's step is a step of its own, as `show` counts them (a
    run across ranks: its phases are no sum over the ranks); its first step is rank 0's."""
    per_step: dict[tuple[int, int, bool], dict[str, float]] = {}
    for step, phase, ns, warmup, *rank in steps:
        if phase in phases:
            r = rank[0] if rank and rank[0] == rank[0] and rank[0] is not None else 0  # NaN, None: rank 0
            row = per_step.setdefault((int(r), int(step), bool(warmup)), {})
            row[phase] = row.get(phase, 0.0) + float(ns)
    ordered = sorted(per_step.items())
    measured = [row for (_, _, warmup), row in ordered if not warmup]
    samples = {p: [row[p] for row in measured if p in row] for p in phases}
    samples = {p: v for p, v in samples.items() if v}
    if measured:
        samples[STEP] = [sum(row.values()) for row in measured]
    first: dict[str, float] = {}
    if ordered and ordered[0][0][2]:  # the first step recorded was a warm-up step
        first = dict(ordered[0][1])
        first[STEP] = sum(ordered[0][1].values())
    return RunSteady({p: steady(v) for p, v in samples.items()}, first, samples)


def ratio_interval(
    numerator: Sequence[float], denominator: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Percentile-bootstrap interval of median(numerator) / median(denominator) (fixed seed); NaN bounds
    with fewer than two samples a side."""
    import numpy as np  # here, not at the top: `run` and `show` import this module and need no numpy

    a, b = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if len(a) < 2 or len(b) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(0)
    ma = np.median(a[rng.integers(0, len(a), (BOOTSTRAP, len(a)))], axis=1)
    mb = np.median(b[rng.integers(0, len(b), (BOOTSTRAP, len(b)))], axis=1)
    ratios = ma / np.where(mb > 0, mb, np.nan)
    tail = (1 - confidence) / 2 * 100
    low, high = np.nanpercentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


STEP_SUM = "step (sum)"  # a run's step as a row among its phases: each measured step's phases added up


@dataclass
class PhaseStats:
    """One phase's figures over a run's measured steps (ns), as `run` prints and the store keeps them."""

    phase: str
    count: int
    mean_ns: float
    std_ns: float | None  # None for one step (stores before it wrote 0.0: `stored_std` reads those)
    median_ns: float
    min_ns: int
    max_ns: int

    @classmethod
    def of(cls, phase: str, durations: Sequence[int]) -> PhaseStats:
        """The figures of `steady` (one computation for every command that shows them)."""
        s = steady(durations)
        return cls(phase, s.count, s.mean_ns, s.std_ns, s.median_ns, min(durations), max(durations))


def phase_stats(steps: Iterable[Mapping[str, int]], phases: Sequence[str]) -> list[PhaseStats]:
    """Per phase of `phases` that the measured steps (each a phase -> ns mapping) have, its figures."""
    steps = list(steps)
    out = []
    for phase in phases:
        durations = [s[phase] for s in steps if phase in s]
        if durations:
            out.append(PhaseStats.of(phase, durations))
    return out


def step_stats(steps: Iterable[Mapping[str, int]], phases: Sequence[str]) -> PhaseStats | None:
    """Statistics of the steps' phase sums; a step missing one of `phases` is left out (None: no step)."""
    sums = [sum(p[name] for name in phases) for p in steps if phases and all(n in p for n in phases)]
    return PhaseStats.of(STEP_SUM, sums) if sums else None
