"""Between-run drift: how far runs of one configuration land apart, and comparisons of runs that allow for it.

The steps of one run share its process (start-up, memory layout, clocks, what else the machine did), so an
interval drawn from them holds the step-to-step noise only. Two runs of one configuration in fresh processes
a minute apart differ by more than that: on an H200, `small` fp32 twice gave forward "+20.3 % (CI
+16.1…+24.7)". So runs are compared by their run means, on the log scale (a ratio's interval is
asymmetric, and a drift is relative):

    log(run mean) = the configuration's level + the run's offset,   offset ~ N(0, τ²)

τ² (the drift: run-to-run variance of a run's mean, its step noise included) is pooled from every group of
runs of one configuration made together (`Drift`: the sum of squared deviations from each group's mean, and
its degrees of freedom, runs − groups), and from the two sides themselves when they hold several runs. B
against A is then Student's t on the difference of the sides' mean log run means, with the standard error
s·√(1/n_A + 1/n_B) and the pooled degrees of freedom (`compare_runs`). One run a side and no drift measured:
no interval at all (a difference cannot be told from drift). One run a side with a drift measured: the
interval is at least as wide as the steps' own.

A drift that changes with the load of a shared machine is what makes the A/A suite (tests/test_aa.py) the
test of this model, not the algebra.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.compare.overhead import CONFIDENCE, STEP_SUM, Comparison
from workloads.names import counted

# how a comparison of runs was made (Comparison.basis)
RUNS, DRIFT, NO_DRIFT = "runs", "drift", "no drift"


@dataclass(frozen=True)
class Drift:
    """The spread of one configuration's run means, on the log scale: `ss`, the squared deviations of each
    run's log mean from its group's mean, summed over groups of runs made together; `df` = runs − groups."""

    ss: float = 0.0
    df: int = 0
    runs: int = 0

    @property
    def variance(self) -> float:
        return self.ss / self.df if self.df > 0 else math.nan

    @property
    def pct(self) -> float:
        """One standard deviation of a run's mean, in percent (NaN: not measured)."""
        return (math.exp(math.sqrt(self.variance)) - 1) * 100 if self.df > 0 else math.nan

    def __add__(self, other: Drift) -> Drift:
        return Drift(self.ss + other.ss, self.df + other.df, self.runs + other.runs)


def drift_of(groups: Iterable[Sequence[float]]) -> Drift:
    """The drift of groups of run means (each group: runs of one configuration made together); a group of
    one run adds nothing, nor does a mean that is not positive."""
    out = Drift()
    for group in groups:
        logs = np.log([m for m in group if m > 0 and math.isfinite(m)])
        if len(logs) > 1:
            out = out + Drift(float(((logs - logs.mean()) ** 2).sum()), len(logs) - 1, len(logs))
    return out


def run_means(steps: pd.DataFrame, phases: Sequence[str] | None = None) -> pd.DataFrame:
    """Each run's mean per phase and of whole steps (STEP_SUM: the phases of a step added, over the steps
    that hold them all): run, phase, mean_ns, steps. `steps`: run, step, phase, duration_ns, and warmup
    (left out) where it is there."""
    s = steps[~steps["warmup"].astype(bool)] if "warmup" in steps else steps
    s = s[["run", "step", "phase", "duration_ns"]]
    if phases is None:
        phases = [p for p in dict.fromkeys(s["phase"]) if p != STEP_SUM]
    s = s[s["phase"].isin(phases)]
    held = s.groupby(["run", "step"])["phase"].transform("nunique")
    whole = s[held == len(phases)].groupby(["run", "step"], as_index=False)["duration_ns"].sum()
    both = pd.concat([s, whole.assign(phase=STEP_SUM)], ignore_index=True)
    out = both.groupby(["run", "phase"], sort=False)["duration_ns"].agg(["mean", "size"]).reset_index()
    return out.rename(columns={"mean": "mean_ns", "size": "steps"})


def drifts(steps: pd.DataFrame) -> dict[str, Drift]:
    """Per phase (and STEP_SUM), the drift of groups of runs: `steps` has group, run, step, phase,
    duration_ns (and warmup); each group is runs of one configuration made together."""
    out: dict[str, Drift] = {}
    for _, part in steps.groupby("group", sort=False):
        means = run_means(part)
        for phase, rows in means.groupby("phase", sort=False):
            out[phase] = out.get(phase, Drift()) + drift_of([rows["mean_ns"].to_numpy()])
    return out


def _step_se2(steps: Sequence[float]) -> float:
    """The squared relative standard error of one run's mean, from its steps (0 with fewer than two)."""
    x = np.asarray(steps, dtype="float64")
    if len(x) < 2 or x.mean() <= 0:
        return 0.0
    return float(x.var(ddof=1) / len(x) / x.mean() ** 2)


def compare_runs(
    a: Sequence[float],
    b: Sequence[float],
    drift: Drift | None = None,
    *,
    steps_a: Sequence[float] = (),
    steps_b: Sequence[float] = (),
    samples: tuple[int, int] | None = None,
    confidence: float = CONFIDENCE,
) -> Comparison:
    """B's run means against A's: the relative difference of their geometric means (the means it gives, so
    that the effect is B's mean over A's) with Student's interval,
    the spread pooled from both sides' runs and `drift` (module docstring). `steps_a`, `steps_b`: with one
    run a side, its steps, whose own standard error the interval never undercuts; `samples`: the steps behind
    each side (default: those, else the runs). No degrees of freedom (one run a side, no drift): NaN bounds,
    basis NO_DRIFT."""
    from scipy.special import stdtrit  # t quantile, as stats.t.ppf, without importing scipy.stats

    la = np.log([x for x in a if x > 0])
    lb = np.log([x for x in b if x > 0])
    pooled = drift_of([np.exp(la), np.exp(lb)]) + (drift or Drift())
    mean_a, mean_b = _level(a, la), _level(b, lb)
    effect = low = high = math.nan
    if len(la) and len(lb):
        d = float(lb.mean() - la.mean())
        effect = (math.exp(d) - 1) * 100
        if pooled.df > 0:
            se2 = pooled.variance * (1 / len(la) + 1 / len(lb))
            if len(la) == 1 and len(lb) == 1:
                se2 = max(se2, _step_se2(steps_a) + _step_se2(steps_b))
            half = float(stdtrit(pooled.df, (1 + confidence) / 2)) * math.sqrt(se2)
            low, high = (math.exp(d - half) - 1) * 100, (math.exp(d + half) - 1) * 100
    basis = NO_DRIFT if pooled.df == 0 else DRIFT if len(la) == 1 and len(lb) == 1 else RUNS
    na, nb = samples or (len(steps_a) or len(la), len(steps_b) or len(lb))
    return Comparison(
        mean_a, mean_b, effect, low, high, na, nb, len(la), len(lb), confidence, basis=basis,
        drift_pct=pooled.pct, drift_runs=pooled.runs,
    )  # fmt: skip


def _level(means: Sequence[float], logs: np.ndarray) -> float:
    """A side's level as the effect compares it: the geometric mean of its positive run means (one run:
    its mean, as measured)."""
    if len(logs) == 1:
        return float(next(x for x in means if x > 0))
    return math.exp(float(logs.mean())) if len(logs) else math.nan


def levels(
    a: Sequence[float], b: Sequence[float], drift: Drift | None = None, confidence: float = CONFIDENCE
) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """Each side's level (the geometric mean of its run means) with its interval, the spread pooled as
    `compare_runs` pools it: ((mean, low, high) of A, of B); NaN bounds without degrees of freedom."""
    from scipy.special import stdtrit

    pooled = drift_of([a, b]) + (drift or Drift())
    out = []
    for side in (a, b):
        logs = np.log([x for x in side if x > 0])
        if not len(logs):
            out.append((math.nan, math.nan, math.nan))
            continue
        m = float(logs.mean())
        if pooled.df == 0:
            out.append((math.exp(m), math.nan, math.nan))
            continue
        half = float(stdtrit(pooled.df, (1 + confidence) / 2)) * math.sqrt(pooled.variance / len(logs))
        out.append((math.exp(m), math.exp(m - half), math.exp(m + half)))
    return out[0], out[1]


def phase_comparisons(
    steps_a: pd.DataFrame, steps_b: pd.DataFrame, phases: Sequence[str], drift: Mapping[str, Drift]
) -> dict[str, Comparison]:
    """Per phase of `phases` and STEP_SUM: B's runs against A's (`compare_runs`), with the drift measured
    for it. Each frame: run, step, phase, duration_ns (and warmup); one run a side or several."""
    ma, mb = run_means(steps_a, phases), run_means(steps_b, phases)
    out = {}
    for phase in [*phases, STEP_SUM]:
        ra, rb = ma[ma["phase"] == phase], mb[mb["phase"] == phase]
        one = len(ra) == 1 and len(rb) == 1
        out[phase] = compare_runs(
            ra["mean_ns"].to_numpy(), rb["mean_ns"].to_numpy(), drift.get(phase),
            steps_a=_steps_of(steps_a, phase, phases) if one else (),
            steps_b=_steps_of(steps_b, phase, phases) if one else (),
            samples=(int(ra["steps"].sum()), int(rb["steps"].sum())),
        )  # fmt: skip
    return out


def _steps_of(steps: pd.DataFrame, phase: str, phases: Sequence[str]) -> np.ndarray:
    """One run's measured durations of `phase` (STEP_SUM: of whole steps over `phases`)."""
    s = steps[~steps["warmup"].astype(bool)] if "warmup" in steps else steps
    if phase != STEP_SUM:
        return s.loc[s["phase"] == phase, "duration_ns"].to_numpy(dtype="float64")
    s = s[s["phase"].isin(phases)]
    held = s.groupby("step")["phase"].transform("nunique")
    return s[held == len(phases)].groupby("step")["duration_ns"].sum().to_numpy(dtype="float64")


def basis_words(c: Comparison) -> str:
    """How the interval was drawn, in a few words: `3 runs a side`, `3 runs and 1 run`, `one run a side,
    drift ±2.1% (8 runs)`, `one run a side, no drift measured`."""
    if c.basis == NO_DRIFT:
        return "one run a side, no drift measured"
    drift = f"drift ±{c.drift_pct:.1f}% ({counted(c.drift_runs, 'run')})"
    if c.basis == DRIFT:
        return f"one run a side, {drift}"
    sides = f"{counted(c.baseline_runs, 'run')} a side" if c.baseline_runs == c.treatment_runs else (
        f"{counted(c.baseline_runs, 'run')} and {counted(c.treatment_runs, 'run')}"
    )  # fmt: skip
    return f"{sides}, {drift}"
