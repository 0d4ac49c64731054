"""Is one side slower than the other? Per-step samples compared with a confidence interval, and a verdict.

Used for profiler overhead (steps without nsys against the same configuration under it); `compare_samples`
knows nothing of profilers, so a run-to-run diff can give the same regression / improvement / inconclusive
answer.

Why Welch on run means: steps of one run share that run's conditions (process start-up, memory layout, what
else the machine was doing), so they are not independent draws, and on a shared machine the run-to-run
spread is often larger than the step-to-step one. A side with two runs or more is therefore summarised by its
run means, whose spread holds both; the two sides may differ in variance (Welch, Satterthwaite's degrees of
freedom). A two-stage bootstrap (runs, then steps) was tried first: with 2 to 5 runs a side drifting from
run to run it called 11 to 30% of no-effect pairs significant at a nominal 5%, because a handful of runs
cannot show a bootstrap their spread; Welch's t keeps it at 1 to 6.5% (benchmarks/overhead_calibration.py,
docs/performance.md). With one run a side only the step-to-step noise is visible, and
`Comparison.runs_seen` is False.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import pandas as pd

from analysis.runs.steady import CONFIDENCE, STEP_SUM

BASELINE = "no nsys"
NO_PROFILER = "no profiler"  # the baseline's label where the profiled side is not (only) nsys


def baseline_label(profilers: Iterable[str]) -> str:
    """ "no nsys" against nsys alone (as it always was), else "no profiler"."""
    found = {p for p in profilers if p and p != "none"}
    return BASELINE if found <= {"nsys"} else NO_PROFILER


Outcome = Literal["increase", "decrease", "inconclusive"]


@dataclass(frozen=True)
class Comparison:
    """Treatment against baseline: relative difference of means in percent, with its confidence interval."""

    baseline_mean: float  # over several runs (analysis.compare.drift): the geometric mean of their means
    treatment_mean: float
    effect_pct: float  # (treatment mean − baseline mean) / baseline mean × 100
    ci_low_pct: float
    ci_high_pct: float
    baseline_samples: int
    treatment_samples: int
    baseline_runs: int
    treatment_runs: int
    confidence: float = CONFIDENCE
    # how the interval was drawn, where runs are compared (analysis.compare.drift): "runs", "drift" (one run
    # a side, the drift measured for the configuration), "no drift" (one run a side, none measured); "" for
    # compare_samples' own; with the drift it used (one run's standard deviation, %) and its runs
    basis: str = ""
    drift_pct: float = math.nan
    drift_runs: int = 0

    @property
    def noise_pct(self) -> float:
        """Half the width of the confidence interval: effects smaller than this cannot be told from noise."""
        return (self.ci_high_pct - self.ci_low_pct) / 2

    @property
    def outcome(self) -> Outcome:
        """increase / decrease when the interval excludes zero, else inconclusive."""
        if math.isnan(self.ci_low_pct) or math.isnan(self.ci_high_pct):
            return "inconclusive"
        if self.ci_low_pct > 0:
            return "increase"
        if self.ci_high_pct < 0:
            return "decrease"
        return "inconclusive"

    @property
    def runs_seen(self) -> bool:
        """Whether run-to-run variation is inside the interval (needs two runs or more on each side)."""
        return self.baseline_runs > 1 and self.treatment_runs > 1


def _groups(samples: pd.DataFrame, value: str, run: str) -> list[np.ndarray]:
    values = samples[value].astype("float64")
    if run not in samples:
        return [values.to_numpy()] if len(values) else []
    return [g.to_numpy() for _, g in values.groupby(samples[run], sort=False) if len(g)]


def _side(groups: list[np.ndarray]) -> tuple[float, float, float]:
    """Mean, squared standard error of that mean, and its degrees of freedom.

    Two runs or more: from the run means (their spread holds the step-to-step noise and the run-to-run
    drift). One run: from its steps.
    """
    if len(groups) > 1:
        means = np.array([g.mean() for g in groups])
        return float(means.mean()), float(means.var(ddof=1) / len(means)), len(means) - 1.0
    if groups and len(groups[0]) > 1:
        g = groups[0]
        return float(g.mean()), float(g.var(ddof=1) / len(g)), len(g) - 1.0
    return (float(groups[0].mean()) if groups else math.nan), math.nan, math.nan


def compare_samples(
    baseline: pd.DataFrame,
    treatment: pd.DataFrame,
    *,
    value: str = "duration_ns",
    run: str = "run",
    confidence: float = CONFIDENCE,
) -> Comparison:
    """Compare the mean of `value` of two sets of samples; `run` (if present) says which run each is from.

    Welch's interval on the log of the ratio of means (unequal variances, Satterthwaite's degrees of freedom),
    turned back into percent: asymmetric, as a ratio's interval should be. Each side's standard error comes
    from its run means when it has two runs or more, else from its steps. Fewer than two samples on a side
    give NaN bounds, which read as inconclusive.
    """
    from scipy.special import stdtrit  # t quantile, as stats.t.ppf, without importing scipy.stats

    a, b = _groups(baseline, value, run), _groups(treatment, value, run)
    (mean_a, var_a, df_a), (mean_b, var_b, df_b) = _side(a), _side(b)
    effect = (mean_b / mean_a - 1) * 100 if mean_a > 0 and mean_b > 0 else math.nan
    low = high = math.nan
    if not math.isnan(effect) and not math.isnan(var_a + var_b):
        # relative variances: the standard error of log(mean)
        ua, ub = var_a / mean_a**2, var_b / mean_b**2
        se = math.sqrt(ua + ub)
        df = (ua + ub) ** 2 / (ua**2 / df_a + ub**2 / df_b) if se > 0 else math.inf
        half = float(stdtrit(df, (1 + confidence) / 2)) * se
        d = math.log(mean_b / mean_a)
        low, high = (math.exp(d - half) - 1) * 100, (math.exp(d + half) - 1) * 100
    na, nb = sum(len(g) for g in a), sum(len(g) for g in b)
    return Comparison(mean_a, mean_b, effect, low, high, na, nb, len(a), len(b), confidence)


def mean_interval(
    samples: pd.DataFrame, *, value: str = "duration_ns", run: str = "run", confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """Mean of `value` and its confidence interval (Student's t; from run means with two runs or more)."""
    from scipy.special import stdtrit  # t quantile, as stats.t.ppf, without importing scipy.stats

    mean, var, df = _side(_groups(samples, value, run))
    if math.isnan(var):
        return mean, math.nan, math.nan
    half = float(stdtrit(df, (1 + confidence) / 2)) * math.sqrt(var) if var > 0 else 0.0
    return mean, mean - half, mean + half


def worded(c: Comparison, words: Mapping[str, str], **extra: str) -> str:
    """The comparison in one of its wordings: `words` holds a format for "too few" (no interval: under two
    steps a side) and for each outcome, over the figures effect, faster (−effect), low and high (the
    interval's ends) and noise, all in %, and any `extra` fields."""
    if math.isnan(c.ci_low_pct):
        return words["too few"].format(**extra)
    figures = {"low": c.ci_low_pct, "high": c.ci_high_pct, "noise": c.noise_pct}
    return words[c.outcome].format(effect=c.effect_pct, faster=-c.effect_pct, **figures, **extra)


class Said(NamedTuple):
    """One outcome of a comparison in words, at three lengths."""

    sentence: str  # one line a person can act on, naming the profiler (`overhead_verdict`)
    bar: str  # the verdict over a bar: without the profiler's name, the interval where the noise is said
    figures: str  # the figures alone, for a cell beside others (`short_verdict`)


INTERVAL = "(CI {low:+.1f}…{high:+.1f}%)"
# The overhead verdict's words, written once: every wording of an outcome is a column here
# (analysis.dashboard.overhead's bar labels are the `bar` column). Never a bare figure when the noise could
# explain it. Faster under the profiler is not an overhead: something else changed between the runs (drift).
VERDICT_WORDS = {
    "too few": Said(
        "inconclusive: too few steps to tell (two or more a side)", "too few steps to tell", "too few steps"
    ),
    "increase": Said(
        "{profiler} adds {effect:.1f}% " + INTERVAL,
        "adds {effect:+.1f}% " + INTERVAL,
        "{effect:+.1f}% ({low:+.1f}…{high:+.1f})",
    ),
    "decrease": Said(
        "faster under {profiler} by {faster:.1f}% " + INTERVAL + ": not an overhead",
        "faster {effect:+.1f}% " + INTERVAL + ": not overhead",
        "faster {effect:+.1f}% ({low:+.1f}…{high:+.1f})",
    ),
    "inconclusive": Said(
        "inconclusive: the noise (±{noise:.1f}%) is larger than the effect",
        "inconclusive " + INTERVAL,
        "inconclusive (±{noise:.0f}%)",
    ),
}


def words_of(column: str) -> dict[str, str]:
    """One column of VERDICT_WORDS (sentence, bar, figures): outcome -> its format."""
    return {outcome: getattr(said, column) for outcome, said in VERDICT_WORDS.items()}


def short_verdict(c: Comparison) -> str:
    """The verdict's figures, for a cell beside others: `+8.1% (+2.0…+14.3)` or `inconclusive (±52%)`."""
    return worded(c, words_of("figures"))


def overhead_verdict(c: Comparison, profiler: str = "nsys") -> str:
    """One line a person can act on (VERDICT_WORDS' sentence)."""
    return worded(c, words_of("sentence"), profiler=profiler)


def step_key(step: int, rank: int | None) -> int:
    """A step's key in an overhead table: in a run across ranks each rank's steps are steps of their own
    (a whole step is one rank's phases summed, never two ranks')."""
    return (rank or 0) * 1_000_000 + step


def overhead_steps(runs: Iterable[tuple[str, int, pd.DataFrame]]) -> pd.DataFrame:
    """The measured steps of (label, repeat, timers) triples as overhead_table reads them: label, repeat,
    step (step_key), phase, duration_ns. `timers`: a run's step, phase, duration_ns, warmup, rank."""
    rows = [
        (label, repeat, step_key(int(step), int(rank)), phase, ns)
        for label, repeat, timers in runs
        for step, phase, ns, warmup, rank in zip(
            timers["step"],
            timers["phase"],
            timers["duration_ns"],
            timers["warmup"],
            timers["rank"].fillna(0),
            strict=True,
        )
        if not warmup
    ]
    return pd.DataFrame(rows, columns=["label", "repeat", "step", "phase", "duration_ns"])


def ordered_labels(steps: pd.DataFrame, baseline: str = BASELINE) -> list[str]:
    """The labels of `steps` in first-seen order, the baseline first."""
    labels = list(dict.fromkeys(steps["label"]))
    if baseline in labels:
        labels.remove(baseline)
        labels.insert(0, baseline)
    return labels


def step_rows(steps: pd.DataFrame, phases: Sequence[str]) -> list[tuple[str, pd.DataFrame]]:
    """(phase, its steps) per phase, then (STEP_SUM, whole steps) when there are several phases."""
    steps = steps[steps["phase"].isin(phases)]
    out = [(phase, steps[steps["phase"] == phase]) for phase in phases]
    if len(phases) > 1 and len(steps):
        keys = ["label", "repeat", "step"]
        out.append((STEP_SUM, steps.groupby(keys, sort=False, as_index=False)["duration_ns"].sum()))
    return out


def comparisons(
    steps: pd.DataFrame, phases: Sequence[str], baseline: str = BASELINE
) -> dict[tuple[str, str], Comparison]:
    """(phase or STEP_SUM, label) -> Comparison of that label's steps against the baseline label's.

    `steps`: label, repeat, step, phase, duration_ns; each (label, repeat) is one run.
    """
    labels = ordered_labels(steps, baseline)[1:] if baseline in set(steps["label"]) else []
    out = {}
    for name, part in step_rows(steps, phases):
        base = part[part["label"] == baseline]
        for label in labels:
            out[name, label] = compare_samples(base, part[part["label"] == label], run="repeat")
    return out


def overhead_table(steps: pd.DataFrame, phases: Sequence[str], baseline: str = BASELINE) -> pd.DataFrame:
    """`steps`: label, repeat, step, phase, duration_ns (measured steps of every run; one run per repeat).

    One row per phase and one for whole steps: mean and sample standard deviation per label (both empty
    where the label has no steps of that phase), and for each label but the baseline its overhead in
    percent of the baseline mean with the 95% confidence interval and a verdict. `overhead (%)` is filled
    only when the interval lies above zero: a figure inside the noise is not an overhead. Labels keep
    first-seen order, the baseline first.
    """
    return _table(steps, phases, baseline, comparisons(steps, phases, baseline))


def _table(
    steps: pd.DataFrame, phases: Sequence[str], baseline: str, found: dict[tuple[str, str], Comparison]
) -> pd.DataFrame:
    labels = ordered_labels(steps, baseline)
    rows = []
    for name, durations in step_rows(steps, phases):
        row: dict[str, object] = {"Phase": name}
        for label in labels:
            d = durations.loc[durations["label"] == label, "duration_ns"]
            row[f"{label} Avg (ns)"] = float(d.mean()) if len(d) else math.nan
            # no samples: no figure (one: 0.0, as every table here prints one instance's StdDev)
            row[f"{label} StdDev (ns)"] = float(d.std(ddof=1)) if len(d) > 1 else 0.0 if len(d) else math.nan
            c = found.get((name, label))
            if c is not None:
                row[f"{label} overhead (%)"] = c.effect_pct if c.outcome == "increase" else math.nan
                row[f"{label} CI low (%)"] = c.ci_low_pct
                row[f"{label} CI high (%)"] = c.ci_high_pct
                row[f"{label} verdict"] = overhead_verdict(c, label)
        rows.append(row)
    out = pd.DataFrame(rows)
    # what a reader needs on any terminal: both sides' times and the overhead; of one profiled kind (`run
    # --nsys`) its verdict too, of several (`--nsys-mode light,full`) the verdicts next (their whole-step
    # verdicts are said below the table), then the spreads and bounds
    means = [f"{label} Avg (ns)" for label in labels]
    overheads = [c for c in out.columns if c.endswith(" overhead (%)")]
    verdicts = [c for c in out.columns if c.endswith(" verdict")]
    one = len(verdicts) == 1
    out.attrs["deciding"] = ["Phase", *means, *overheads, *(verdicts if one else [])]
    # an empty overhead column is the finding that no phase showed one: kept, as its verdicts say why
    out.attrs["kept_empty"] = overheads
    out.attrs["priority"] = [] if one else verdicts
    out.attrs["wrap"] = [c for c in out.columns if c.endswith(" verdict")]  # sentences: wrapped, never cut
    return out


def headline(steps: pd.DataFrame, phases: Sequence[str], baseline: str = BASELINE) -> dict[str, Comparison]:
    """Per label: the comparison of whole steps (or of the only phase), the figure `--precision` watches."""
    return _headline(comparisons(steps, phases, baseline), phases)


def _headline(found: dict[tuple[str, str], Comparison], phases: Sequence[str]) -> dict[str, Comparison]:
    name = STEP_SUM if len(phases) > 1 else phases[0]
    return {label: c for (row, label), c in found.items() if row == name}


def overhead_and_headline(
    steps: pd.DataFrame, phases: Sequence[str], baseline: str = BASELINE
) -> tuple[pd.DataFrame, dict[str, Comparison]]:
    """`overhead_table` and `headline` of the same steps, their comparisons made once."""
    found = comparisons(steps, phases, baseline)
    return _table(steps, phases, baseline, found), _headline(found, phases)
